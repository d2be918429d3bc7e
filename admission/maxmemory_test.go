package admission_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEvictionPolicyWarning checks that a gate's first call reads Redis's
// maxmemory-policy, from CONFIG GET or, where CONFIG is renamed away, from
// INFO memory, and logs a warning that names any policy but noeviction
// and says why; and that MaxmemoryPolicy reports it.
func TestEvictionPolicyWarning(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		args   []string
		policy string
	}{
		{"noeviction: no warning", nil, "noeviction"},
		{"allkeys-lru: warned", []string{"--maxmemory-policy", "allkeys-lru"}, "allkeys-lru"},
		{"volatile-lru, CONFIG renamed away: warned from INFO", []string{"--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""}, "volatile-lru"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs(tc.args...))
			rdb := srv.Client(t)
			ctx := context.Background()
			policies, err := admission.MaxmemoryPolicy(ctx, rdb)
			if err != nil {
				t.Fatal(err)
			}
			if got := policies[srv.Addr()]; got != tc.policy || len(policies) != 1 {
				t.Errorf("MaxmemoryPolicy = %v, want %s: %s", policies, srv.Addr(), tc.policy)
			}

			var logs syncBuffer
			q := admission.Quota{Limit: 10, Window: time.Minute}
			g := admission.New(rdb, admission.StaticQuotas{Default: &q},
				admission.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			defer g.Close()
			if _, err := g.Admit(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			warned := func() bool { return strings.Contains(logs.String(), "maxmemory-policy") }
			if tc.policy == admission.NoEviction {
				time.Sleep(200 * time.Millisecond)
				if warned() {
					t.Errorf("warned under noeviction: %s", logs.String())
				}
				return
			}
			for deadline := time.Now().Add(5 * time.Second); !warned() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			got := logs.String()
			for _, want := range []string{"level=WARN", tc.policy, "noeviction", "evicts keys", "bound", srv.Addr()} {
				if !strings.Contains(got, want) {
					t.Errorf("the warning does not say %q: %s", want, got)
				}
			}
			if n := strings.Count(got, "maxmemory-policy is"); n != 1 {
				t.Errorf("warned %d times, want once", n)
			}
		})
	}
}
