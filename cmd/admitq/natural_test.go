package main

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// naturalCompare is the order sortNatural sorts by, one pair at a time.
func naturalCompare(a, b string) int {
	if c := strings.Compare(naturalKey(a), naturalKey(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func TestNaturalCompare(t *testing.T) {
	t.Parallel()
	got := []string{"tenant-10", "tenant-2", "tenant-1", "a", "tenant-02", "b1", "tenant-", "tenant-2a", "b01", "ü", "B", "tenant-9x1", "tenant-9x10", "tenant-9x2"}
	slices.SortFunc(got, naturalCompare)
	want := []string{"B", "a", "b01", "b1", "tenant-", "tenant-1", "tenant-02", "tenant-2", "tenant-2a", "tenant-9x1", "tenant-9x2", "tenant-9x10", "tenant-10", "ü"}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("natural order (-want,+got):\n%s", diff)
	}
	for _, s := range want {
		if naturalCompare(s, s) != 0 {
			t.Errorf("naturalCompare(%q, itself) != 0", s)
		}
	}
	got = slices.Clone(want)
	slices.Reverse(got)
	sortNatural(got)
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("sortNatural (-want,+got):\n%s", diff)
	}
}

// TestNaturalKeyMatchesReading: naturalCompare, which compares keys,
// agrees with a plain reading of the rule (digit runs by value, other
// bytes as they are, ties byte by byte) on many generated names.
func TestNaturalKeyMatchesReading(t *testing.T) {
	t.Parallel()
	reading := func(a, b string) int {
		x, y := a, b
		for x != "" && y != "" {
			if isDigit(x[0]) && isDigit(y[0]) {
				dx, dy := 0, 0
				for dx < len(x) && isDigit(x[dx]) {
					dx++
				}
				for dy < len(y) && isDigit(y[dy]) {
					dy++
				}
				nx, ny := strings.TrimLeft(x[:dx], "0"), strings.TrimLeft(y[:dy], "0")
				if c := cmp.Compare(len(nx), len(ny)); c != 0 {
					return c
				}
				if c := strings.Compare(nx, ny); c != 0 {
					return c
				}
				x, y = x[dx:], y[dy:]
				continue
			}
			if x[0] != y[0] {
				return cmp.Compare(x[0], y[0])
			}
			x, y = x[1:], y[1:]
		}
		if c := cmp.Compare(len(x), len(y)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	}
	alphabet := []string{"0", "00", "1", "2", "9", "10", "007", "a", "b", "-", "/", ":", "A", "é", "~"}
	var names []string
	for i := range 3000 {
		var b strings.Builder
		for j, n := 0, 1+i%5; j < n; j++ {
			b.WriteString(alphabet[(i*7+j*13+i/5)%len(alphabet)])
		}
		names = append(names, b.String())
	}
	for i, a := range names {
		for _, b := range names[max(0, i-40):i] {
			if got, want := naturalCompare(a, b), reading(a, b); got != want {
				t.Fatalf("naturalCompare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}
