package quotainput

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

func TestCheckNamesTheFieldAsTheCommandLineDoes(t *testing.T) {
	for _, c := range []struct {
		desc             string
		limit            int
		window, maxDelay time.Duration
		mode             string
		inFlight, parked int
		want, message    string
	}{
		{"limit below one", 0, time.Second, 0, "log", 0, 0, "--limit 0: want at least 1", "0: want at least 1"},
		{"window under a millisecond", 1, time.Microsecond, 0, "log", 0, 0, "--window 1µs: want at least 1ms", "1µs: want at least 1ms"},
		{"negative max delay", 1, time.Second, -time.Second, "log", 0, 0, "--max-delay -1s: want 0 or more", "-1s: want 0 or more"},
		{"unknown mode", 1, time.Second, 0, "fast", 0, 0, `--mode "fast": want log or counter`, `"fast": want log or counter`},
		{"empty mode", 1, time.Second, 0, "", 0, 0, `--mode "": want log or counter`, `"": want log or counter`},
		{"negative cap", 1, time.Second, 0, "log", -1, 0, "--max-in-flight -1: want 0 (no cap) or more", "-1: want 0 (no cap) or more"},
		{"negative parked bound", 1, time.Second, 0, "log", 2, -5, "--max-parked -5: want 0 (the default) or more", "-5: want 0 (the default) or more"},
	} {
		_, err := Check(c.limit, c.window, c.maxDelay, c.mode, c.inFlight, c.parked)
		fe, ok := err.(*FieldError)
		if !ok {
			t.Errorf("%s: got %v, want a *FieldError", c.desc, err)
			continue
		}
		if fe.Error() != c.want || fe.Message() != c.message {
			t.Errorf("%s: got %q / %q, want %q / %q", c.desc, fe.Error(), fe.Message(), c.want, c.message)
		}
	}
	q, err := Check(100, time.Minute, 30*time.Second, "counter", 0, 0)
	if want := (admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: 30 * time.Second, Mode: admission.Counter}); err != nil || q != want {
		t.Errorf("a good quota: got %v, %v; want %v", q, err, want)
	}
	// A cap in counter mode is taken: the dispatcher counts the tenant's
	// tasks in flight itself, whatever the mode.
	q, err = Check(1, time.Second, 0, "counter", 2, 0)
	if want := (admission.Quota{Limit: 1, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}); err != nil || q != want {
		t.Errorf("a cap in counter mode: got %v, %v; want %v", q, err, want)
	}
	q, errs, err := Parse("none", "", "", "counter", "2", "")
	if want := (admission.Quota{Limit: admission.NoLimit, Mode: admission.Counter, MaxInFlight: 2}); err != nil || errs != nil || q != want {
		t.Errorf("a cap in counter mode, no rate limit, from a form: got %v, %v, %v; want %v", q, errs, err, want)
	}
}

func TestParseReportsEveryFieldItCannotRead(t *testing.T) {
	_, errs, err := Parse("ten", "soon", "later", "log", "four", "many")
	if err == nil || len(errs) != 5 || errs["limit"] == nil || errs["window"] == nil || errs["max-delay"] == nil || errs["max-in-flight"] == nil || errs["max-parked"] == nil {
		t.Fatalf("got %v, %v; want errors for limit, window, max-delay, max-in-flight and max-parked", errs, err)
	}
	_, errs, _ = Parse("0", "soon", "", "log", "", "-5")
	if errs["max-parked"] == nil || errs["max-parked"].Message() != "-5: want 0 (the default) or more" {
		t.Errorf("a negative parked bound beside other mistakes: got %v; want max-parked's own error too", errs)
	}
	if errs["limit"] == nil || errs["limit"].Message() != "0: want at least 1" {
		t.Errorf("limit 0 beside a bad window: got %v; want limit's own error too", errs)
	}
	q, errs, err := Parse(" 5 ", "2s", "", "log", "", "")
	if err != nil || errs != nil || q != (admission.Quota{Limit: 5, Window: 2 * time.Second}) {
		t.Errorf("a good quota with no max delay: got %v, %v, %v", q, errs, err)
	}
	q, _, err = Parse("5", "2s", "", "log", " 4 ", "50")
	if want := (admission.Quota{Limit: 5, Window: 2 * time.Second, MaxInFlight: 4, MaxParked: 50}); err != nil || q != want {
		t.Errorf("a capped quota: got %v, %v; want %v", q, err, want)
	}
}

func TestWeightIsCheckedAsTheCommandLineNamesIt(t *testing.T) {
	for _, c := range []struct {
		desc, in string
		want     float64
		err      string
	}{
		{"empty is 0, meaning 1", "", 0, ""},
		{"a whole number", "3", 3, ""},
		{"a fraction", " 0.5 ", 0.5, ""},
		{"the largest", "1e6", 1e6, ""},
		{"negative", "-1", 0, "--weight -1: want 0 (meaning 1) up to 1000000"},
		{"NaN", "NaN", 0, "--weight NaN: want 0 (meaning 1) up to 1000000"},
		{"infinite", "+Inf", 0, "--weight +Inf: want 0 (meaning 1) up to 1000000"},
		{"too big", "1000001", 0, "--weight 1000001: want 0 (meaning 1) up to 1000000"},
		{"not a number", "heavy", 0, `--weight "heavy": want a number such as 1, 3 or 0.5`},
	} {
		w, fe := ParseWeight(c.in)
		switch {
		case c.err == "" && (fe != nil || w != c.want):
			t.Errorf("%s: ParseWeight(%q) = %v, %v; want %v", c.desc, c.in, w, fe, c.want)
		case c.err != "" && (fe == nil || fe.Error() != c.err):
			t.Errorf("%s: ParseWeight(%q) error = %v, want %q", c.desc, c.in, fe, c.err)
		}
	}
	q := admission.Quota{Limit: 1, Window: time.Second}
	if got, err := WithWeight(q, 2.5); err != nil || got.Weight != 2.5 {
		t.Errorf("WithWeight(2.5) = %+v, %v", got, err)
	}
	if _, err := WithWeight(q, -2); err == nil {
		t.Error("WithWeight(-2): no error")
	}
}

func TestWarningOnlyForASubSecondMaxDelay(t *testing.T) {
	for _, c := range []struct {
		maxDelay time.Duration
		warn     bool
	}{{0, false}, {time.Millisecond, true}, {999 * time.Millisecond, true}, {time.Second, false}, {time.Minute, false}} {
		got := Warning(admission.Quota{Limit: 1, Window: time.Second, MaxDelay: c.maxDelay})
		if (got != "") != c.warn {
			t.Errorf("MaxDelay %v: warning %q, want one: %v", c.maxDelay, got, c.warn)
		}
	}
	// No rate limit defers nothing: its MaxDelay means nothing.
	if got := Warning(admission.Quota{Limit: admission.NoLimit, MaxDelay: 500 * time.Millisecond}); got != "" {
		t.Errorf("a quota with no rate limit: warning %q, want none", got)
	}
}

// "none" is admission.NoLimit: a quota that only caps, weighs or pauses,
// with no window needed.
func TestNoneIsNoLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		err  string
	}{
		{"none", admission.NoLimit, ""},
		{" NONE ", admission.NoLimit, ""},
		{"5", 5, ""},
		{"0", 0, "--limit 0: want at least 1"},
		{"-1", 0, "--limit -1: want at least 1"},
		{"unlimited", 0, `--limit "unlimited": want a whole number, or none for no rate limit`},
	} {
		n, fe := ParseLimit(c.in)
		switch {
		case c.err == "" && (fe != nil || n != c.want):
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", c.in, n, fe, c.want)
		case c.err != "" && (fe == nil || fe.Error() != c.err):
			t.Errorf("ParseLimit(%q) error = %v, want %q", c.in, fe, c.err)
		}
	}
	if got := FormatLimit(admission.NoLimit); got != "none" {
		t.Errorf("FormatLimit(NoLimit) = %q", got)
	}
	q, err := Check(admission.NoLimit, 0, 0, "log", 4, 0)
	if want := (admission.Quota{Limit: admission.NoLimit, MaxInFlight: 4}); err != nil || q != want {
		t.Errorf("Check(NoLimit, no window, cap 4) = %v, %v; want %v", q, err, want)
	}
	if err := CheckQuota(admission.Quota{Limit: admission.NoLimit, Weight: 2}); err != nil {
		t.Errorf("CheckQuota(NoLimit, weight 2) = %v", err)
	}
	if err := CheckQuota(admission.Quota{Limit: 5, Weight: 2}); err == nil || err.Error() != "--window 0s: want at least 1ms" {
		t.Errorf("CheckQuota(5 with no window) = %v", err)
	}
	q, errs, err := Parse("none", "", "", "log", "", "")
	if err != nil || errs != nil || q != (admission.Quota{Limit: admission.NoLimit}) {
		t.Errorf(`Parse("none", no window) = %v, %v, %v`, q, errs, err)
	}
}
