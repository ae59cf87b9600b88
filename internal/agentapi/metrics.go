package agentapi

import (
	"bytes"
	"context"
	"fmt"
	"mime"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricsLimit bounds the exposition of GET MetricsPath: about 50 series
// and a few per database take some kilobytes; a longer answer is refused
// rather than held in the manager's memory.
const MetricsLimit = 4 << 20

// metricsAccept asks for Prometheus' text format, version 0.0.4 (what the
// agent's promhttp handler answers by default too).
const metricsAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Metrics returns the metric families the agent serves at MetricsPath,
// by name: the PostgreSQL metrics of its instance.
func (c Client) Metrics(ctx context.Context, baseURL string) (map[string]*dto.MetricFamily, error) {
	url := baseURL + MetricsPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	req.Header.Set("Accept", metricsAccept)
	b, header, err := c.send(req, MetricsLimit+1)
	if err != nil {
		return nil, err
	}
	if len(b) > MetricsLimit {
		return nil, fmt.Errorf("GET %s: the answer is longer than %d bytes", url, MetricsLimit)
	}
	if ct := header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "text/plain" {
			return nil, fmt.Errorf("GET %s: the answer is %q, not Prometheus' text format", url, ct)
		}
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("GET %s: parsing the answer: %w", url, err)
	}
	return families, nil
}
