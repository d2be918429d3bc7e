package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/admitq/admitq/admission"
)

// addTenants gives n tenants, tenant-00000 and up, a quota of their own
// with one pipeline of HSETs; the encoded quota is the one RedisQuotas.Set
// writes.
func addTenants(t *testing.T, st *stack, n int) {
	t.Helper()
	st.setQuota(t, "tenant-00000", admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 5 * time.Second})
	enc, err := st.rdb.HGet(t.Context(), "admitq:quotas", "tenant-00000").Result()
	if err != nil {
		t.Fatal(err)
	}
	pipe := st.rdb.Pipeline()
	for i := 1; i < n; i++ {
		pipe.HSet(t.Context(), "admitq:quotas", fmt.Sprintf("tenant-%05d", i), enc)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// commands returns the calls per command since the last CONFIG RESETSTAT,
// leaving out the INFO and CONFIG that measure them.
func commands(t *testing.T, st *stack) map[string]int {
	t.Helper()
	info, err := st.rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok || strings.HasPrefix(name, "info") || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.Atoi(calls)
	}
	return out
}

// TestARefreshCostsOneCallPerRowShown pins down the dashboard's cost to
// Redis: a refresh costs one script call per row shown, whatever the number
// of tenants, and the list of all tenants is one paged read (HSCAN) every listTTL.
func TestARefreshCostsOneCallPerRowShown(t *testing.T) {
	st := newStack(t)
	addTenants(t, st, 10_000)
	d, hs := st.dashboard(t, Config{})

	get := func(query string) tenantsPage {
		t.Helper()
		resp, err := http.Get(hs.URL + "/api/tenants?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p tenantsPage
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Error != "" {
			t.Fatalf("page error: %s", p.Error)
		}
		return p
	}

	st.rdb.ConfigResetStat(t.Context())
	p := get("")
	first := commands(t, st)
	if p.All != 10_000 || len(p.Rows) != DefaultPageSize || p.Pages != 200 {
		t.Fatalf("first page: %d tenants, %d rows, %d pages; want 10000, %d, 200", p.All, len(p.Rows), p.Pages, DefaultPageSize)
	}
	// RedisQuotas.List reads the hash in HSCAN pages of about 1,000.
	if first["hscan"] < 10 || first["hscan"] > 20 || first["hgetall"] != 0 {
		t.Errorf("a first refresh read the quota list in %d pages, want once, in about 10: %v", first["hscan"], first)
	}

	st.rdb.ConfigResetStat(t.Context())
	p = get("page=200&since=" + strconv.FormatInt(time.Now().UnixMilli(), 10))
	again := commands(t, st)
	// Commands that the usage script runs inside Redis count in
	// commandstats too: TIME and ZCOUNT, in the script's one call. A
	// connection the pool dials meanwhile (under load, for a concurrent
	// call) says HELLO and names itself: not a cost of the refresh.
	outside := 0
	for name, n := range again {
		switch name {
		case "evalsha", "time", "zcount", "hello", "client|setinfo":
		default:
			outside += n
		}
	}
	if again["evalsha"] != DefaultPageSize || outside != 0 {
		t.Errorf("a refresh within %v cost %v, want %d script calls and nothing else: one per row shown", listTTL, again, DefaultPageSize)
	}
	if p.Page != 200 || p.Rows[len(p.Rows)-1].Tenant != "tenant-09999" {
		t.Errorf("last page: page %d ending at %s", p.Page, p.Rows[len(p.Rows)-1].Tenant)
	}
	t.Logf("Redis cost per refresh with 10,000 tenants, %d shown: %d script calls (inside them: %v); plus one paged read of all quotas every %v",
		DefaultPageSize, again["evalsha"], again, listTTL)

	st.rdb.ConfigResetStat(t.Context())
	if p = get("q=TENANT-0999"); p.Total != 10 || len(p.Rows) != 10 || p.Rows[0].Tenant != "tenant-09990" {
		t.Errorf("search TENANT-0999: %d matches, first %v; want 10 from tenant-09990, case ignored", p.Total, p.Rows)
	}
	if c := commands(t, st); c["evalsha"] != 10 {
		t.Errorf("search cost %v, want 10 script calls", c)
	}
	_ = d
}

// TestTheTenantsPageLoadsQuicklyWith10000Tenants measures the page's load
// in the browser, to the first rows drawn, with 10,000 tenants.
func TestTheTenantsPageLoadsQuicklyWith10000Tenants(t *testing.T) {
	st := newStack(t)
	addTenants(t, st, 10_000)
	_, hs := st.dashboard(t, Config{})
	ctx := browser(t)

	var loads []time.Duration
	for i := range 3 {
		// The first load reads the quota list; the next ones reuse it for
		// up to listTTL, as a refresh does.
		start := time.Now()
		within(t, ctx, 30*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/?page="+strconv.Itoa(100+i)))
		waitJS(t, ctx, "the rows", `document.querySelectorAll("#rows tr[data-tenant]").length === 50 && `+cellJS(fmt.Sprintf("tenant-%05d", (99+i)*50), "in_window")+` === "0 / 10"`)
		loads = append(loads, time.Since(start))
		ms := evalJS[float64](t, ctx, `performance.getEntriesByName("rows-drawn")[0].startTime`)
		nav := evalJS[float64](t, ctx, `performance.getEntriesByType("navigation")[0].responseEnd - performance.getEntriesByType("navigation")[0].requestStart`)
		t.Logf("load %d: navigation to rows drawn %.0f ms in the browser (server answer %.0f ms); %v seen from the test", i+1, ms, nav, loads[i])
	}
	if loads[0] > 10*time.Second {
		t.Errorf("first load took %v; want well under 10s", loads[0])
	}
	search := time.Now()
	within(t, ctx, 30*time.Second, "searching", chromedp.Navigate(hs.URL+"/?q=tenant-0424"))
	waitJS(t, ctx, "the matches", `document.querySelectorAll("#rows tr[data-tenant]").length === 10`)
	t.Logf("search among 10,000 tenants, to rows drawn: %v", time.Since(search))
}
