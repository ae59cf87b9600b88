package bench

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

var (
	sizes     = flag.String("sizes", "100,1000", "comma-separated numbers of Databases to converge, one run each")
	idleFor   = flag.Duration("idle", 5*time.Minute, "how long to watch the operator idle after the largest run converged")
	resync    = flag.Duration("resync", time.Minute, "the operator's --sync-period: every Database reconciled this often while idle")
	unrelated = flag.Int("unrelated-secrets", 10000, "Secrets of 100 KiB, not dbkeeper's, created after the largest run to show they cost the operator no memory")
	workers   = flag.Int("workers", 12, "parallel writers of the plain client and of the Database creator (the operator runs 6 controllers x 2 workers)")
	reportDir = flag.String("report", "", "directory to write benchmarks.md and convergence.png into; empty writes nothing")
)

var local *cluster.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		fmt.Println("bench: benchmarks only (run `make bench`); nothing to do without -bench")
		return
	}
	cluster.RunTests(m, "bench", func(c *cluster.Cluster) { local = c })
}

// BenchmarkConvergence runs each size once (-benchtime=1x): the floor
// first, then the operator, on fresh namespaces of the same cluster.
func BenchmarkConvergence(b *testing.B) {
	ns, err := parseSizes(*sizes)
	if err != nil {
		b.Fatal(err)
	}
	binary := operator.Build(b, "manager-bench")
	var results []result
	for i, n := range ns {
		largest := i == len(ns)-1
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			if b.N != 1 {
				b.Fatalf("run with -benchtime=1x: one convergence of %d Databases is one sample", n)
			}
			r := run(b, binary, n, largest)
			results = append(results, r)
			b.ReportMetric(r.Floor.Created.Seconds(), "floor-s")
			b.ReportMetric(r.Converged.Seconds(), "converge-s")
			b.ReportMetric(r.Converged.Seconds()/r.Floor.Created.Seconds(), "ratio-to-floor")
			b.ReportMetric(r.WritesPerDB, "writes/db")
			b.ReportMetric(r.ReconcileP99*1000, "reconcile-p99-ms")
			b.ReportMetric(r.Memory.RSS/(1<<20), "rss-MiB")
		})
	}
	if *reportDir != "" && len(results) == len(ns) {
		if err := writeReport(*reportDir, results); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s and %s", filepath.Join(*reportDir, "benchmarks.md"), filepath.Join(*reportDir, "convergence.png"))
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
