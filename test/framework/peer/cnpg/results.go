package cnpg

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// Results are the measurements of a side-by-side comparison: for each
// operator and fault, the measured time of each run, the runs that
// failed or were never run, and the acknowledged writes lost.
type Results struct {
	operators, faults []string
	cells             map[[2]string]*cell
}

type cell struct {
	measured             []time.Duration
	failed, notRun, lost int
}

// NewResults returns empty Results for the operators (the table's
// columns, in order) and the faults (its rows).
func NewResults(operators, faults []string) *Results {
	r := &Results{operators: operators, faults: faults, cells: map[[2]string]*cell{}}
	for _, o := range operators {
		for _, f := range faults {
			r.cells[[2]string{o, f}] = &cell{}
		}
	}
	return r
}

func (r *Results) cell(operator, fault string) *cell {
	c, ok := r.cells[[2]string{operator, fault}]
	if !ok {
		// a programming error of the caller: the table has no such cell
		panic(fmt.Sprintf("no result cell for operator %q and fault %q", operator, fault))
	}
	return c
}

// Add records one run's measured time.
func (r *Results) Add(operator, fault string, d time.Duration) {
	c := r.cell(operator, fault)
	c.measured = append(c.measured, d)
}

// Failed records a run that failed (measured or not).
func (r *Results) Failed(operator, fault string) { r.cell(operator, fault).failed++ }

// NotRun records n runs that were never started.
func (r *Results) NotRun(operator, fault string, n int) { r.cell(operator, fault).notRun += n }

// Lost records n acknowledged writes found missing after a run.
func (r *Results) Lost(operator, fault string, n int) { r.cell(operator, fault).lost += n }

// Measured is every run's time of operator and fault, in run order.
func (r *Results) Measured(operator, fault string) []time.Duration {
	return slices.Clone(r.cell(operator, fault).measured)
}

// Markdown is the comparison as a markdown table: a row per fault, a
// column per operator with the median (dbtest.Percentile) and the maximum of
// its runs, how many were measured, and what went wrong (failed runs,
// runs not run, acknowledged writes lost). label names a fault's row (the
// fault itself when it returns "").
func (r *Results) Markdown(label func(fault string) string) string {
	var b strings.Builder
	b.WriteString("| fault |")
	for _, o := range r.operators {
		fmt.Fprintf(&b, " %s p50 / max |", o)
	}
	b.WriteString("\n|---|")
	for range r.operators {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range r.faults {
		name := f
		if label != nil && label(f) != "" {
			name = label(f)
		}
		fmt.Fprintf(&b, "| %s |", name)
		for _, o := range r.operators {
			fmt.Fprintf(&b, " %s |", r.cell(o, f).String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// String is a cell of Markdown: "p50 / max (n runs[, trouble])".
func (c *cell) String() string {
	var s string
	if len(c.measured) == 0 {
		s = "–"
	} else {
		s = fmt.Sprintf("%s / %s", seconds(dbtest.Percentile(c.measured, 50)), seconds(slices.Max(c.measured)))
	}
	notes := []string{fmt.Sprintf("%d runs", len(c.measured))}
	if len(c.measured) == 1 {
		notes[0] = "1 run"
	}
	if c.failed > 0 {
		notes = append(notes, fmt.Sprintf("%d failed", c.failed))
	}
	if c.notRun > 0 {
		notes = append(notes, fmt.Sprintf("%d not run", c.notRun))
	}
	if c.lost > 0 {
		notes = append(notes, fmt.Sprintf("%d acknowledged writes lost", c.lost))
	}
	return s + " (" + strings.Join(notes, ", ") + ")"
}

// seconds formats d in seconds with one decimal, "12.3 s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}
