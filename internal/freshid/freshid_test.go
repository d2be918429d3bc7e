package freshid

import (
	"context"
	"testing"
)

// A mark names its IDs and no others; an unmarked context names none, and
// a mark within a mark is its own.
func TestAMarkNamesItsIDs(t *testing.T) {
	bg := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
		in   []string
		out  []string
	}{
		{"unmarked", bg, nil, []string{"a", ""}},
		{"one", Mark(bg, "a"), []string{"a"}, []string{"b", ""}},
		{"several", Mark(bg, "a", "b", "c"), []string{"a", "b", "c"}, []string{"d"}},
		{"none", Mark(bg), nil, []string{"a"}},
		{"within another", Mark(Mark(bg, "a"), "b"), []string{"b"}, []string{"a"}},
	} {
		for _, id := range c.in {
			if !Made(c.ctx, id) {
				t.Errorf("%s: %q not marked, want marked", c.name, id)
			}
		}
		for _, id := range c.out {
			if Made(c.ctx, id) {
				t.Errorf("%s: %q marked, want not", c.name, id)
			}
		}
		if len(c.in) > 0 && !MadeAll(c.ctx, c.in) {
			t.Errorf("%s: MadeAll(%q) false, want true", c.name, c.in)
		}
		if MadeAll(c.ctx, append(c.in, c.out...)) {
			t.Errorf("%s: MadeAll(%q) true, want false", c.name, append(c.in, c.out...))
		}
		if MadeAll(c.ctx, nil) {
			t.Errorf("%s: MadeAll of no IDs true, want false", c.name)
		}
	}
}
