package main

import (
	"cmp"
	"slices"
	"strings"
)

// sortNatural sorts names as people read them: runs of digits by their
// value, so tenant-2 comes before tenant-10; everything else, and ties such
// as tenant-02 and tenant-2, byte by byte. Each name's key is made once,
// not at every comparison.
func sortNatural(names []string) {
	type keyed struct{ key, name string }
	ks := make([]keyed, len(names))
	for i, n := range names {
		ks[i] = keyed{naturalKey(n), n}
	}
	slices.SortFunc(ks, func(x, y keyed) int {
		return cmp.Or(strings.Compare(x.key, y.key), strings.Compare(x.name, y.name))
	})
	for i, k := range ks {
		names[i] = k.name
	}
}

// naturalKey returns a string whose byte order is s's natural order: each
// run of digits becomes '0', its length without leading zeros in two
// bytes, then those digits. Every '0' of a key starts such a run, and all
// digits sort alike against any other byte, so a run meets either another
// run, compared by length and then digits, or the byte a digit would have
// met.
func naturalKey(s string) string {
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			b = append(b, s[i])
			i++
			continue
		}
		n := i
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		run := strings.TrimLeft(s[i:n], "0")
		b = append(b, '0', byte(len(run)>>8), byte(len(run)))
		b = append(b, run...)
		i = n
	}
	return string(b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
