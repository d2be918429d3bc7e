package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape returns a Source that reads the Prometheus text format from url,
// such as the /metrics that admitq worker serves. A nil client means one with
// a 2 s timeout.
func Scrape(url string, client *http.Client) Source {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	return &scrapeSource{url: url, client: client}
}

type scrapeSource struct {
	url    string
	client *http.Client
}

func (s *scrapeSource) Name() string { return s.url }

func (s *scrapeSource) Gather(ctx context.Context) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	// The text format: every Prometheus client serves it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: %s", s.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.url, err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}
