package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
)

// BenchmarkMetricsCost measures what the PostgreSQL metrics cost an
// instance, against its floor in the same run: a real agent and its primary
// left alone for a minute (the agent's own status checks, the server's
// background work), then the same minute with its /metrics scraped every
// second through the agent's HTTPS-less test endpoint as the manager does.
// The CPU is the agent's (utime+stime) and the server's, whose backends'
// time reaches the postmaster's cutime+cstime as they exit (each scrape is
// one connection); the memory is the agent's resident set. The extra CPU
// per scrape, and so per instance at the manager's default 15 s interval,
// is the difference of the two minutes. Run with -benchtime=1x:
//
//	go test -run '^$' -bench '^BenchmarkMetricsCost$' -benchtime 1x -v ./internal/agent
func BenchmarkMetricsCost(b *testing.B) {
	if b.N != 1 {
		b.Fatal("run with -benchtime=1x: one minute of each phase is the sample")
	}
	var r metricsCost
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "MetricsCostBenchmark", F: r.run}})
	if !ok {
		b.Fatal("the metrics benchmark failed: its log is above")
	}
	perScrape := (r.scraped.cpu - r.idle.cpu) / time.Duration(r.scrapes)
	b.ReportMetric(float64(perScrape.Microseconds())/1000, "cpu-ms/scrape")
	b.ReportMetric(1000*perScrape.Seconds()/15, "millicores-at-15s")
	b.ReportMetric(1000*r.idle.cpu.Seconds()/r.phase.Seconds(), "idle-millicores")
	b.ReportMetric((r.idle.cpu.Seconds()+perScrape.Seconds()*r.phase.Seconds()/15)/r.idle.cpu.Seconds(), "cpu-at-15s/idle-ratio")
	b.ReportMetric(float64(r.latency[len(r.latency)/2].Microseconds())/1000, "scrape-p50-ms")
	b.ReportMetric(float64(r.latency[len(r.latency)-1].Microseconds())/1000, "scrape-max-ms")
	b.ReportMetric(float64(r.idle.rss)/(1<<20), "agent-rss-idle-MiB")
	b.ReportMetric(float64(r.scraped.rss)/(1<<20), "agent-rss-scraped-MiB")
}

// metricsCost is what one run measured.
type metricsCost struct {
	phase         time.Duration
	scrapes       int
	idle, scraped usage
	latency       []time.Duration
}

// usage is the CPU time the instance spent in a phase and the agent's
// resident set at its end.
type usage struct {
	cpu time.Duration
	rss int64
}

func (r *metricsCost) run(t *testing.T) {
	r.phase = time.Minute
	c := newCluster(t) // fails without PostgreSQL
	ctx := context.Background()
	a := c.start("db-0")
	_, err := c.client.Bootstrap(ctx, a.url, agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb})
	require.NoError(t, err)
	c.waitStatus(a, 90*time.Second, "a running primary", runningAs(agentapi.RolePrimary))
	agentPID, postmaster := a.cmd.Process.Pid, postmasterPID(a.pgdata)
	cpu := func() time.Duration { return cpuTime(t, agentPID) + cpuTime(t, postmaster) }
	time.Sleep(10 * time.Second) // past the start's own work

	start := cpu()
	time.Sleep(r.phase)
	rss, err := framework.ProcessRSS(agentPID)
	require.NoError(t, err)
	r.idle = usage{cpu: cpu() - start, rss: rss}

	start = cpu()
	deadline := time.Now().Add(r.phase)
	for tick := time.Now(); tick.Before(deadline); tick = tick.Add(time.Second) {
		time.Sleep(time.Until(tick))
		began := time.Now()
		_, err := c.client.Metrics(ctx, a.url, agentapi.MetricsOptions{})
		require.NoError(t, err)
		r.latency = append(r.latency, time.Since(began))
	}
	rss, err = framework.ProcessRSS(agentPID)
	require.NoError(t, err)
	r.scraped = usage{cpu: cpu() - start, rss: rss}
	r.scrapes = len(r.latency)
	slices.Sort(r.latency)
	t.Logf("idle minute: CPU %s, agent RSS %d KiB; %d scrapes in a minute: CPU %s, agent RSS %d KiB; scrape p50 %s, max %s",
		r.idle.cpu, r.idle.rss>>10, r.scrapes, r.scraped.cpu, r.scraped.rss>>10, r.latency[len(r.latency)/2], r.latency[len(r.latency)-1])
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// cpuTime is the CPU time of pid and of its children that exited and were
// waited for (utime, stime, cutime, cstime of /proc/<pid>/stat).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	require.NoError(t, err)
	// the fields after the command, which is in parentheses and may hold spaces
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime, fields 14-17 of proc(5)
		n, err := strconv.ParseInt(fields[i], 10, 64)
		require.NoError(t, err)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}
