package dispatch

import (
	"strings"
	"testing"
)

// TestAMalformedReplyIsAnError: a script reply whose values are not what
// the scripts return (a table where text belongs) is an error naming what
// came back, never a grant of tenant "" or a verdict of "".
func TestAMalformedReplyIsAnError(t *testing.T) {
	t.Parallel()
	entry := "0|1700000000000000|0|task1"
	for _, c := range []struct {
		desc string
		read func() error
	}{
		{"a grant's tenant", func() error { _, _, err := readPicks([]any{int64(1), []any{}, entry, "0", ""}); return err }},
		{"a grant's entry", func() error { _, _, err := readPicks([]any{int64(1), "T", nil, "0", ""}); return err }},
		{"a grant's front", func() error { _, _, err := readPicks([]any{int64(1), "T", entry, []any{"1"}, ""}); return err }},
		{"a park's verdict", func() error { _, _, _, err := parkReply([]any{nil, int64(1), int64(0)}); return err }},
	} {
		if err := c.read(); err == nil || !strings.Contains(err.Error(), "want a string") {
			t.Errorf("%s malformed: err %v, want one saying it wants a string", c.desc, err)
		}
	}
	picks, _, err := readPicks([]any{int64(1), "T", entry, "1", ""})
	if err != nil || len(picks) != 1 || picks[0].tenant != "T" || !picks[0].front || picks[0].entry.id != "task1" {
		t.Errorf("a well-formed grant: %+v, %v", picks, err)
	}
}
