package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestDemoOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	chart := filepath.Join(t.TempDir(), "demo.svg")
	res := admitq(t, "demo", "--duration", "5s", "--chart", chart)
	if res.code != 0 {
		t.Fatalf("demo: %v", res)
	}
	for _, re := range []string{
		`(?m)^admitq demo: 3 tenants for 5s on an embedded Redis \(miniredis\) at 127\.0\.0\.1:\d+$`,
		`(?m)^check 1  no tenant got more than its limit in any window: PASS$`,
		`(?m)^         \d+ recorded slots checked exactly; most in any window: noisy 10/10, steady \d+/20, small \d/5$`,
		`(?m)^         tasks that started before their slot: 0$`,
		`(?m)^check 2  every task sent was processed, is in asynq, or was refused back to its producer: PASS$`,
		`(?m)^         \d+ sent = \d+ processed \+ 0 in asynq \+ \d+ refused \(\d+ rejected, 0 errors\) \+ 0 lost$`,
		`(?m)^noisy sent 40/s and started 10/s \(median second\): flattened to its quota of 10/s\.$`,
		// Per-second lines depend on timing; their shape does not.
		`(?m)^     1  noisy  +10 +\d+ +\d+ +\d+ +\d+/10 +\+\d+ ahead$`,
		`(?m)^        steady +\d+ +0 +0 +\d+ +\d+/20$`,
	} {
		if !regexp.MustCompile(re).MatchString(res.stdout) {
			t.Errorf("demo output does not match %s:\n%s", re, res.stdout)
		}
	}
	if strings.Contains(res.stdout, "\x1b[") {
		t.Error("demo output holds colour codes, but stdout is not a terminal")
	}
	f, err := os.Open(chart)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	paths, noisy := 0, false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
		if cd, ok := tok.(xml.CharData); ok && strings.HasPrefix(string(cd), "noisy started") {
			noisy = true
		}
	}
	if paths < 10 || !noisy {
		t.Errorf("chart has %d paths and noisy's legend %v; want the axes, grid, per tenant a line and a quota, and a legend", paths, noisy)
	}
}
