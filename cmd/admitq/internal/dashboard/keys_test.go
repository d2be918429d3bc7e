package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// withStats makes d read qs as the dispatcher's state instead of Redis's.
func withStats(d *Server, qs ...dispatch.QueueStats) {
	d.dispMu.Lock()
	defer d.dispMu.Unlock()
	d.queueStats = func(context.Context) ([]dispatch.QueueStats, error) { return qs, nil }
	d.dispRead = time.Time{}
}

func getKeys(t *testing.T, base, query string) (int, keysView) {
	t.Helper()
	resp, err := http.Get(base + "/api/keys" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v keysView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET /api/keys%s: %v", query, err)
	}
	return resp.StatusCode, v
}

func (st *stack) setKey(t *testing.T, key string, q admission.Quota) {
	t.Helper()
	if err := st.quotas.SetKey(t.Context(), key, q); err != nil {
		t.Fatal(err)
	}
}

// TestTheKeysPageShowsEachQueuesKeys: each dispatched queue's keys, as
// the dispatcher lists them (in flight against the cap, waiting, paused,
// held and for how long), and every key quota, also on a key's own page.
func TestTheKeysPageShowsEachQueuesKeys(t *testing.T) {
	st := newStack(t)
	st.setKey(t, "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20})
	st.setKey(t, "api:github", admission.Quota{Limit: admission.NoLimit, Paused: true})
	st.setKey(t, "idle", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 3})
	d, hs := st.dashboard(t, Config{})
	now := time.Unix(1_800_000_000, 0)
	withStats(d,
		dispatch.QueueStats{Queue: "dash", Now: now, Keys: []dispatch.KeyStats{
			{Key: "api:github", Waiting: 7, Paused: true},
			{Key: "api:stripe", InFlight: 21, Cap: 20, AtCap: true, Waiting: 315},
			{Key: "smtp", InFlight: 1, Waiting: 3, Held: true, HeldUntil: now.Add(1500 * time.Millisecond)},
		}},
		dispatch.QueueStats{Queue: "mail", Now: now, Keys: []dispatch.KeyStats{{Key: "api:stripe", InFlight: 2, Cap: 20}}},
		dispatch.QueueStats{Queue: "quiet", Now: now},
	)
	stripe := func(inFlight, waiting int, atCap bool) keyRow {
		return keyRow{Key: "api:stripe", Shown: "api:stripe", Link: "/keys/api:stripe", InFlight: inFlight, Cap: 20, AtCap: atCap, OverCap: inFlight > 20, Waiting: waiting}
	}
	code, v := getKeys(t, hs.URL, "")
	want := keysView{
		Queues: []queueKeys{
			{Queue: "dash", Keys: []keyRow{
				{Key: "api:github", Shown: "api:github", Link: "/keys/api:github", Waiting: 7, Paused: true},
				stripe(21, 315, true),
				{Key: "smtp", Shown: "smtp", Link: "/keys/smtp", InFlight: 1, Waiting: 3, Held: true, HeldMs: 1500},
			}},
			{Queue: "mail", Keys: []keyRow{stripe(2, 0, false)}},
		},
		Quotas: []keyQuotaRow{
			{Key: "api:github", Shown: "api:github", Link: "/keys/api:github", Quota: "no cap, paused", Paused: true},
			{Key: "api:stripe", Shown: "api:stripe", Link: "/keys/api:stripe", Quota: "max in flight 20", Cap: 20},
			{Key: "idle", Shown: "idle", Link: "/keys/idle", Quota: "max in flight 3", Cap: 3},
		},
		Most: dispatch.StatsKeys, Every: 300,
	}
	if diff := cmp.Diff(want, v); code != http.StatusOK || diff != "" {
		t.Errorf("GET /api/keys: %d (-want,+got):\n%s", code, diff)
	}

	code, v = getKeys(t, hs.URL, "?k=api:stripe")
	want = keysView{Key: "api:stripe",
		Queues: []queueKeys{{Queue: "dash", Keys: []keyRow{stripe(21, 315, true)}}, {Queue: "mail", Keys: []keyRow{stripe(2, 0, false)}}},
		Quotas: []keyQuotaRow{want.Quotas[1]},
		Most:   dispatch.StatsKeys, Every: 300,
	}
	if diff := cmp.Diff(want, v); code != http.StatusOK || diff != "" {
		t.Errorf("GET /api/keys?k=api:stripe: %d (-want,+got):\n%s", code, diff)
	}
	if _, v = getKeys(t, hs.URL, "?k=nowhere"); len(v.Queues) != 0 || len(v.Quotas) != 0 || v.Error != "" {
		t.Errorf("a key with no tasks and no quota: %+v, want nothing and no error", v)
	}

	page := getBody(t, hs.URL+"/keys")
	for _, w := range []string{`href="/keys">Keys</a>`, `id="queues"`, `id="quota-rows"`, `id="pause-key"`, `action="/key"`, `"api:stripe"`} {
		if !strings.Contains(page, w) {
			t.Errorf("the keys page lacks %s", w)
		}
	}
	page = getBody(t, hs.URL+"/keys/api:github")
	for _, w := range []string{`id="paused"`, `id="resume"`, `Its quota: <b>no cap, paused</b>`, `name="key" value="api:github"`} {
		if !strings.Contains(page, w) {
			t.Errorf("api:github's page lacks %s", w)
		}
	}
	if page := getBody(t, hs.URL+"/keys/smtp"); !strings.Contains(page, `id="pause"`) || !strings.Contains(page, "No quota") {
		t.Error("smtp's page, a key without a quota: want a Pause button and the words No quota")
	}
}

// TestAFullQueueOfKeysSaysSo: a queue listing dispatch.StatsKeys keys may
// hold more, and the page says so.
func TestAFullQueueOfKeysSaysSo(t *testing.T) {
	st := newStack(t)
	d, hs := st.dashboard(t, Config{})
	keys := make([]dispatch.KeyStats, dispatch.StatsKeys)
	for i := range keys {
		keys[i] = dispatch.KeyStats{Key: "k" + itoa(1000+i), Waiting: 1}
	}
	withStats(d, dispatch.QueueStats{Queue: "dash", Keys: keys}, dispatch.QueueStats{Queue: "few", Keys: keys[:3]})
	_, v := getKeys(t, hs.URL, "")
	if len(v.Queues) != 2 || !v.Queues[0].More || v.Queues[1].More || len(v.Queues[0].Keys) != dispatch.StatsKeys {
		t.Errorf("queues %d; more %v; want 2 queues, the first with %d keys and more", len(v.Queues), []bool{v.Queues[0].More, v.Queues[1].More}, dispatch.StatsKeys)
	}
}

// TestKeyPauseAndResumeFlipOnlyPaused: the key page's buttons set and
// clear the key quota's Paused and keep its cap; a key without a quota is
// paused with one that only pauses, and cannot be resumed.
func TestKeyPauseAndResumeFlipOnlyPaused(t *testing.T) {
	st := newStack(t)
	capped := admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20}
	st.setKey(t, "api:stripe", capped)
	_, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("8d", 32)
	flip := func(action, key string) *http.Response {
		t.Helper()
		return postTo(t, hs.URL, "/key", url.Values{"action": {action}, "key": {key}}, csrf, nil)
	}
	quota := func(key string) admission.Quota {
		t.Helper()
		q, err := st.quotas.GetKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	paused := capped
	paused.Paused = true
	for range 2 { // the second pause changes nothing, and is no error
		resp := flip("pause", "api:stripe")
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/keys/api:stripe?saved="+url.QueryEscape("max in flight 20, paused") {
			t.Fatalf("pause: %d to %q, want 303 to the key's page", resp.StatusCode, loc)
		}
		if got := quota("api:stripe"); got != paused {
			t.Fatalf("after pause: %+v, want %+v", got, paused)
		}
	}
	page := getBody(t, hs.URL+"/keys/api:stripe?saved=x")
	for _, w := range []string{`id="paused"`, `id="resume"`, `id="saved"`} {
		if !strings.Contains(page, w) {
			t.Errorf("the page of the paused key lacks %s", w)
		}
	}
	if resp := flip("resume", "api:stripe"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d, want 303", resp.StatusCode)
	}
	if got := quota("api:stripe"); got != capped {
		t.Fatalf("after resume: %+v, want %+v", got, capped)
	}

	// A key without a quota.
	if got := flip("resume", "smtp").StatusCode; got != http.StatusConflict {
		t.Errorf("resume of a key without a quota: %d, want 409", got)
	}
	if _, err := st.quotas.GetKey(t.Context(), "smtp"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("a refused resume wrote a quota: %v", err)
	}
	// A name with a slash and a space stays whole, in the form and the URL;
	// one that looks like HTML is only text.
	for _, key := range []string{"smtp", "mail/out box", "<b>bold</b>"} {
		resp := flip("pause", key)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/keys/"+url.PathEscape(key)+"?") {
			t.Errorf("pause of %q: %d to %q", key, resp.StatusCode, loc)
		}
		if got, want := quota(key), (admission.Quota{Limit: admission.NoLimit, Paused: true}); got != want {
			t.Errorf("%q after pause: %+v, want %+v (a quota that only pauses)", key, got, want)
		}
	}
	if page := getBody(t, hs.URL+"/keys/"+url.PathEscape("mail/out box")); !strings.Contains(page, `<span class="mono" id="key-name">mail/out box</span>`) || !strings.Contains(page, `id="paused"`) {
		t.Errorf("the page of %q does not name it whole, or not as paused", "mail/out box")
	}
	if page := getBody(t, hs.URL+"/keys/"+url.PathEscape("<b>bold</b>")); strings.Contains(page, "<b>bold</b>") || !strings.Contains(page, "&lt;b&gt;bold&lt;/b&gt;") {
		t.Error("the page of key <b>bold</b> holds its name as HTML, or not as text")
	}
	log := st.log.String()
	for _, w := range []string{`msg="dashboard: key paused" key=api:stripe quota="max in flight 20, paused" by="loopback`, `msg="dashboard: key resumed" key=api:stripe`} {
		if !strings.Contains(log, w) {
			t.Errorf("log lacks %s:\n%s", w, log)
		}
	}
}

// TestKeyWritesNeedWhatAQuotaEditNeeds: the key buttons go through every
// check the quota form does.
func TestKeyWritesNeedWhatAQuotaEditNeeds(t *testing.T) {
	st := newStack(t)
	st.setKey(t, "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20})
	_, open := st.dashboard(t, Config{})
	_, ro := st.dashboard(t, Config{ReadOnly: true})
	_, tok := st.dashboard(t, Config{Token: "sekrit"})
	csrf := strings.Repeat("9e", 32)
	for _, key := range []string{"api:stripe", "new-key"} {
		pause := func() url.Values { return url.Values{"action": {"pause"}, "key": {key}} }
		for _, c := range refusedWrites(open.URL, ro.URL, tok.URL, csrf) {
			if got := postTo(t, c.base, "/key", pause(), c.csrf, c.header).StatusCode; got != c.want {
				t.Errorf("%s, key %s: %d, want %d", c.desc, key, got, c.want)
			}
			if q, _ := st.quotas.GetKey(t.Context(), key); q.Paused {
				t.Fatalf("%s: %s got paused", c.desc, key)
			}
		}
		if got := postTo(t, tok.URL, "/key", pause(), csrf, http.Header{"Authorization": {"Bearer sekrit"}}).StatusCode; got != http.StatusSeeOther {
			t.Errorf("with the token, key %s: %d, want 303", key, got)
		}
		if q, _ := st.quotas.GetKey(t.Context(), key); !q.Paused {
			t.Errorf("with the token, %s is not paused", key)
		}
	}
	page := getBody(t, ro.URL+"/keys/api:stripe")
	if strings.Contains(page, `id="pause-form"`) || !strings.Contains(page, `id="paused"`) {
		t.Error("a read-only dashboard shows a key's pause form, or not its paused badge")
	}
	if strings.Contains(getBody(t, ro.URL+"/keys"), `id="pause-key"`) {
		t.Error("a read-only dashboard shows the form that pauses a key")
	}
}

// TestBadKeyNamesAreRefused: a key name the rules refuse
// (admission.ValidateKey), in a form or a URL, gets a 4xx that says why,
// and nothing is written.
func TestBadKeyNamesAreRefused(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("af", 32)
	for _, c := range []struct{ desc, key, says string }{
		{"an empty key", "", "invalid key: empty"},
		{"a control character", "api\x00stripe", "control character"},
		{"a newline", "api\nstripe", "control character"},
		{"257 bytes", strings.Repeat("k", 257), "257 bytes, the limit is 256"},
		{"not UTF-8", "api:\xff", "not valid UTF-8"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			resp := postTo(t, hs.URL, "/key", url.Values{"action": {"pause"}, "key": {c.key}}, csrf, nil)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("pause: %d, want 400", resp.StatusCode)
			}
			if code, v := getKeys(t, hs.URL, "?k="+url.QueryEscape(c.key)); code != http.StatusBadRequest || !strings.Contains(v.Error, c.says) {
				t.Errorf("GET /api/keys?k=: %d, error %q; want 400 saying %q", code, v.Error, c.says)
			}
			if c.key == "" {
				return // /keys/ is not a key's page
			}
			resp, err := http.Get(hs.URL + "/keys/" + url.PathEscape(c.key))
			if err != nil {
				t.Fatal(err)
			}
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body[:n]), c.says) {
				t.Errorf("GET its page: %d %q, want 404 saying %q", resp.StatusCode, body[:n], c.says)
			}
		})
	}
	if got := postTo(t, hs.URL, "/key", url.Values{"action": {"delete"}, "key": {"api:stripe"}}, csrf, nil).StatusCode; got != http.StatusBadRequest {
		t.Errorf("action delete: %d, want 400", got)
	}
	if keys, err := st.quotas.ListKeys(t.Context()); err != nil || len(keys) != 0 {
		t.Errorf("key quotas after refused writes: %v, %v; want none", keys, err)
	}
}
