package instancemetrics

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The labels the manager adds to every series of an instance. A series
// the agent serves with a label of the same name keeps it as
// exported_<name>, as a Prometheus server would.
const (
	LabelNamespace = "namespace"
	LabelDatabase  = "database"
	LabelPod       = "pod"
)

// Prefix begins the name of every family served again: the agents'
// PostgreSQL metrics. Others are left out, so that no series of an agent
// can collide with one of the manager's own.
const Prefix = "dbkeeper_postgres_"

// failuresToDrop is how many scrapes of an instance that failed in a row
// drop its series: one failure keeps the last values for an interval
// more (scrape_up says 0), two drop them.
const failuresToDrop = 2

var (
	scrapeUpDesc = prometheus.NewDesc("dbkeeper_instance_scrape_up",
		"1 when the manager's last scrape of the instance's agent succeeded, else 0: after one failure the instance's dbkeeper_postgres_* series are its previous scrape's, after two in a row they are left out until a scrape succeeds.",
		[]string{LabelNamespace, LabelDatabase, LabelPod}, nil)
	roundDurationDesc = prometheus.NewDesc("dbkeeper_instance_scrape_round_duration_seconds",
		"How long the manager's last round of scrapes of every instance took, in seconds; a round longer than --instance-metrics-interval delays the next one.",
		nil, nil)
)

// Target is an instance whose series the store holds: its pod, and the
// Database and namespace of that pod.
type Target struct {
	Namespace, Database, Pod string
}

// compare orders targets by namespace, Database and pod.
func (t Target) compare(o Target) int {
	return cmp.Or(strings.Compare(t.Namespace, o.Namespace), strings.Compare(t.Database, o.Database), strings.Compare(t.Pod, o.Pod))
}

// Store holds the last scrape of every instance, as compact families
// replaced on each scrape, and serves them as a prometheus.Collector with
// the labels of Target added. It is an unchecked collector (its series
// are whatever the agents serve): it describes nothing, and keeps every
// family's help and type the same across instances so that a gather
// never fails.
type Store struct {
	mu        sync.Mutex
	instances map[Target]*instanceState
	// round is the last round's duration, zero before the first.
	round time.Duration
}

// instanceState is what the store holds of one instance.
type instanceState struct {
	// families are the last successful scrape's, nil once dropped; never
	// modified once stored (Collect reads them without the lock).
	families []family
	// failures counts the scrapes that failed since the last success.
	failures int
}

// family is a metric family of one instance. Its strings are interned:
// one copy of each, shared by every instance that serves it, for as long
// as one does (names, help texts, label values such as a role).
type family struct {
	name, help unique.Handle[string]
	kind       prometheus.ValueType
	series     []series
}

// series is one sample of a family: its label names (sorted, shared by
// the family's series that have the same) and values.
type series struct {
	names, values []unique.Handle[string]
	value         float64
}

var _ prometheus.Collector = (*Store)(nil)

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{instances: map[Target]*instanceState{}}
}

// Keep drops every instance but targets, with its series and scrape_up.
func (s *Store) Keep(targets []Target) {
	keep := make(map[Target]bool, len(targets))
	for _, t := range targets {
		keep[t] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.instances {
		if !keep[t] {
			delete(s.instances, t)
		}
	}
}

// Record stores a scrape of t: its families when err is nil, else a
// failure (the failuresToDrop-th in a row drops t's series). It returns
// how many scrapes of t had failed in a row before this one.
func (s *Store) Record(t Target, families map[string]*dto.MetricFamily, err error) int {
	var converted []family
	if err == nil {
		converted = convert(families)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.instances[t]
	if st == nil {
		st = &instanceState{}
		s.instances[t] = st
	}
	before := st.failures
	if err == nil {
		st.families, st.failures = converted, 0
		return before
	}
	st.failures++
	if st.failures >= failuresToDrop {
		st.families = nil
	}
	return before
}

// SetRoundDuration records how long the last round of scrapes took.
func (s *Store) SetRoundDuration(d time.Duration) {
	s.mu.Lock()
	s.round = d
	s.mu.Unlock()
}

// Reset drops everything: a scraper that stopped serves no stale series.
func (s *Store) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.instances)
	s.round = 0
}

// Describe implements prometheus.Collector: nothing, the store is an
// unchecked collector.
func (s *Store) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: scrape_up of every instance
// and the series of those not dropped, with the Target's labels. The
// help and type of a family are those of the first instance (by
// namespace, Database, pod) that serves it: an instance that serves it
// with another type (an agent of another version) is left out of it. A
// series Prometheus refuses is left out.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	type instance struct {
		target   Target
		families []family
		failures int
	}
	s.mu.Lock()
	snapshot := make([]instance, 0, len(s.instances))
	for t, st := range s.instances {
		snapshot = append(snapshot, instance{t, st.families, st.failures})
	}
	round := s.round
	s.mu.Unlock()
	slices.SortFunc(snapshot, func(a, b instance) int { return a.target.compare(b.target) })

	if round > 0 {
		ch <- prometheus.MustNewConstMetric(roundDurationDesc, prometheus.GaugeValue, round.Seconds())
	}
	type head struct {
		help string
		kind prometheus.ValueType
	}
	heads := map[string]head{}
	descs := map[string]*prometheus.Desc{}
	for _, in := range snapshot {
		t := in.target
		up := 1.0
		if in.failures > 0 {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(scrapeUpDesc, prometheus.GaugeValue, up, t.Namespace, t.Database, t.Pod)
		for _, f := range in.families {
			name := f.name.Value()
			h, ok := heads[name]
			if !ok {
				h = head{f.help.Value(), f.kind}
				heads[name] = h
			} else if h.kind != f.kind {
				continue
			}
			for _, sr := range f.series {
				names := valuesOf(sr.names, LabelNamespace, LabelDatabase, LabelPod)
				key := name + "\xfe" + strings.Join(names, "\xff")
				d := descs[key]
				if d == nil {
					d = prometheus.NewDesc(name, h.help, names, nil)
					descs[key] = d
				}
				m, err := prometheus.NewConstMetric(d, h.kind, sr.value, valuesOf(sr.values, t.Namespace, t.Database, t.Pod)...)
				if err != nil {
					continue
				}
				ch <- m
			}
		}
	}
}

// convert keeps of families those named Prefix*, gauges, counters and
// untyped, in a compact form: names interned, labels sorted, a label of
// Target's renamed exported_<name>, a series with a repeated label or
// seen before in its family left out (a gather would fail on it).
func convert(families map[string]*dto.MetricFamily) []family {
	var out []family
	for _, name := range slices.Sorted(maps.Keys(families)) {
		mf := families[name]
		kind, ok := valueType(mf.GetType())
		if !ok || !strings.HasPrefix(name, Prefix) {
			continue
		}
		f := family{name: intern(name), help: intern(mf.GetHelp()), kind: kind}
		namesOf := map[string][]unique.Handle[string]{}
		seen := map[string]bool{}
		for _, m := range mf.GetMetric() {
			v, ok := sampleValue(mf.GetType(), m)
			if !ok {
				continue
			}
			sr, ok := labelsOf(m.GetLabel())
			if !ok {
				continue
			}
			joined := strings.Join(valuesOf(sr.names), "\xff")
			key := joined + "\xfe" + strings.Join(valuesOf(sr.values), "\xff")
			if seen[key] {
				continue
			}
			seen[key] = true
			if shared, ok := namesOf[joined]; ok {
				sr.names = shared
			} else {
				namesOf[joined] = sr.names
			}
			sr.value = v
			f.series = append(f.series, sr)
		}
		if len(f.series) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// labelsOf is the series of pairs, sorted by name, a name of Target's
// renamed; false when a name is repeated.
func labelsOf(pairs []*dto.LabelPair) (series, bool) {
	type pair struct{ name, value string }
	ps := make([]pair, 0, len(pairs))
	for _, p := range pairs {
		name := p.GetName()
		switch name {
		case LabelNamespace, LabelDatabase, LabelPod:
			name = "exported_" + name
		}
		ps = append(ps, pair{name, p.GetValue()})
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.name, b.name) })
	sr := series{names: make([]unique.Handle[string], len(ps)), values: make([]unique.Handle[string], len(ps))}
	for i, p := range ps {
		if i > 0 && ps[i-1].name == p.name {
			return series{}, false
		}
		sr.names[i], sr.values[i] = intern(p.name), intern(p.value)
	}
	return sr, true
}

// valueType is the type t is served as; false for the types the store
// does not keep (summaries and histograms: the agents serve none).
func valueType(t dto.MetricType) (prometheus.ValueType, bool) {
	switch t {
	case dto.MetricType_GAUGE:
		return prometheus.GaugeValue, true
	case dto.MetricType_COUNTER:
		return prometheus.CounterValue, true
	case dto.MetricType_UNTYPED:
		return prometheus.UntypedValue, true
	}
	return 0, false
}

// sampleValue is m's value as a sample of a family of type t.
func sampleValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch {
	case t == dto.MetricType_GAUGE && m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case t == dto.MetricType_COUNTER && m.Counter != nil:
		return m.Counter.GetValue(), true
	case t == dto.MetricType_UNTYPED && m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// intern is the handle of s's one copy.
func intern(s string) unique.Handle[string] { return unique.Make(s) }

// valuesOf are the values of handles followed by more.
func valuesOf(handles []unique.Handle[string], more ...string) []string {
	out := make([]string, 0, len(handles)+len(more))
	for _, h := range handles {
		out = append(out, h.Value())
	}
	return append(out, more...)
}
