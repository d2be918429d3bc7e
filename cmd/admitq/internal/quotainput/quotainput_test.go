package quotainput

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

func TestCheckNamesTheFieldAsTheCommandLineDoes(t *testing.T) {
	for _, c := range []struct {
		desc                string
		limit               int
		window, maxDelay    time.Duration
		mode, want, message string
	}{
		{"limit below one", 0, time.Second, 0, "log", "--limit 0: want at least 1", "0: want at least 1"},
		{"window under a millisecond", 1, time.Microsecond, 0, "log", "--window 1µs: want at least 1ms", "1µs: want at least 1ms"},
		{"negative max delay", 1, time.Second, -time.Second, "log", "--max-delay -1s: want 0 or more", "-1s: want 0 or more"},
		{"unknown mode", 1, time.Second, 0, "fast", `--mode "fast": want log or counter`, `"fast": want log or counter`},
		{"empty mode", 1, time.Second, 0, "", `--mode "": want log or counter`, `"": want log or counter`},
	} {
		_, err := Check(c.limit, c.window, c.maxDelay, c.mode)
		fe, ok := err.(*FieldError)
		if !ok {
			t.Errorf("%s: got %v, want a *FieldError", c.desc, err)
			continue
		}
		if fe.Error() != c.want || fe.Message() != c.message {
			t.Errorf("%s: got %q / %q, want %q / %q", c.desc, fe.Error(), fe.Message(), c.want, c.message)
		}
	}
	q, err := Check(100, time.Minute, 30*time.Second, "counter")
	if want := (admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: 30 * time.Second, Mode: admission.Counter}); err != nil || q != want {
		t.Errorf("a good quota: got %v, %v; want %v", q, err, want)
	}
}

func TestParseReportsEveryFieldItCannotRead(t *testing.T) {
	_, errs, err := Parse("ten", "soon", "later", "log")
	if err == nil || len(errs) != 3 || errs["limit"] == nil || errs["window"] == nil || errs["max-delay"] == nil {
		t.Fatalf("got %v, %v; want errors for limit, window and max-delay", errs, err)
	}
	_, errs, _ = Parse("0", "soon", "", "log")
	if errs["limit"] == nil || errs["limit"].Message() != "0: want at least 1" {
		t.Errorf("limit 0 beside a bad window: got %v; want limit's own error too", errs)
	}
	q, errs, err := Parse(" 5 ", "2s", "", "log")
	if err != nil || errs != nil || q != (admission.Quota{Limit: 5, Window: 2 * time.Second}) {
		t.Errorf("a good quota with no max delay: got %v, %v, %v", q, errs, err)
	}
}
