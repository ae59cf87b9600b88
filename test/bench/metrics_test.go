package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// scrape is one read of a Prometheus text endpoint.
type scrape map[string]*dto.MetricFamily

// scrapeURL reads url with the given HTTP client.
func scrapeURL(ctx context.Context, hc *http.Client, url string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return families, nil
}

// apiServerScraper reads the kube-apiserver's /metrics as the admin.
type apiServerScraper struct {
	hc   *http.Client
	host string
}

func newAPIServerScraper(cfg *rest.Config) (*apiServerScraper, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &apiServerScraper{hc: hc, host: cfg.Host}, nil
}

func (s *apiServerScraper) scrape(ctx context.Context) (scrape, error) {
	return scrapeURL(ctx, s.hc, strings.TrimSuffix(s.host, "/")+"/metrics")
}

// sum adds up the counter (or gauge) values of metric whose labels match.
func (s scrape) sum(metric string, match func(labels map[string]string) bool) float64 {
	f, ok := s[metric]
	if !ok {
		return 0
	}
	var total float64
	for _, m := range f.GetMetric() {
		labels := labelMap(m)
		if match != nil && !match(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// by sums metric by the value of one label.
func (s scrape) by(metric, label string, match func(map[string]string) bool) map[string]float64 {
	out := map[string]float64{}
	f, ok := s[metric]
	if !ok {
		return out
	}
	for _, m := range f.GetMetric() {
		labels := labelMap(m)
		if match != nil && !match(labels) {
			continue
		}
		out[labels[label]] += m.GetCounter().GetValue()
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// histogram is the cumulative buckets of a histogram, summed over series.
type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative counts
}

// histogramOf merges the series of a histogram metric that match.
func (s scrape) histogramOf(metric string, match func(map[string]string) bool) histogram {
	byBound := map[float64]float64{}
	f, ok := s[metric]
	if ok {
		for _, m := range f.GetMetric() {
			if match != nil && !match(labelMap(m)) {
				continue
			}
			h := m.GetHistogram()
			// The text format lists the +Inf bucket with the others; the
			// sample count is that bucket whether it is listed or not.
			for _, b := range h.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
			byBound[math.Inf(1)] += float64(h.GetSampleCount())
		}
	}
	var h histogram
	for b := range byBound {
		h.bounds = append(h.bounds, b)
	}
	sort.Float64s(h.bounds)
	for _, b := range h.bounds {
		h.counts = append(h.counts, byBound[b])
	}
	return h
}

// minus is h with the counts of an earlier read of the same histogram
// taken away: the observations between the two reads.
func (h histogram) minus(earlier histogram) histogram {
	before := map[float64]float64{}
	for i, b := range earlier.bounds {
		before[b] = earlier.counts[i]
	}
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts))}
	for i, b := range h.bounds {
		out.counts[i] = h.counts[i] - before[b]
	}
	return out
}

// total is the number of observations.
func (h histogram) total() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile estimates the q-quantile by linear interpolation within the
// bucket it falls in, as PromQL's histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	n := h.total()
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, b := range h.bounds {
		if h.counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower // beyond the last finite bucket
			}
			inBucket := h.counts[i] - below
			if inBucket == 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/inBucket
		}
		lower, below = b, h.counts[i]
	}
	return lower
}

// memory is the operator's footprint: resident set and Go heap in use.
type memory struct {
	RSS, Heap float64
}

// sampleMemory reads the operator's RSS and heap in use n times, interval
// apart, and returns the medians, which a garbage collection between two
// reads moves less than any single read.
func sampleMemory(ctx context.Context, op *operatorProcess, n int, interval time.Duration) (memory, error) {
	var rss, heap []float64
	for i := range n {
		if i > 0 {
			time.Sleep(interval)
		}
		r, err := framework.ProcessRSS(op.proc.Pid())
		if err != nil {
			return memory{}, err
		}
		s, err := op.scrape(ctx)
		if err != nil {
			return memory{}, err
		}
		rss = append(rss, float64(r))
		heap = append(heap, s.sum("go_memstats_heap_inuse_bytes", nil))
	}
	return memory{RSS: median(rss), Heap: median(heap)}, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
