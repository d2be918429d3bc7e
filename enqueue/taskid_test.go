package enqueue

import (
	"testing"

	"github.com/google/uuid"
)

func TestNewTaskIDIsRandomUUID(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		s := newTaskID()
		u, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("newTaskID() = %q: %v", s, err)
		}
		if u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != s {
			t.Fatalf("newTaskID() = %q: version %v, variant %v, canonical %q; want a version 4 RFC 4122 UUID in canonical form", s, u.Version(), u.Variant(), u.String())
		}
		if seen[s] {
			t.Fatalf("newTaskID() repeated %q", s)
		}
		seen[s] = true
	}
}

func TestNewTaskIDAllocatesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	if n := testing.AllocsPerRun(100, func() { _ = newTaskID() }); n > 1 {
		t.Errorf("newTaskID allocates %v times per call, want 1 (the string)", n)
	}
}
