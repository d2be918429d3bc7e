package dispatch_test

import (
	"context"
	"time"

	"github.com/admitq/admitq/admission"
)

// setKey sets key's quota and waits until the gate reads it.
func (s *stack) setKey(key string, q admission.Quota) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.quotas.SetKey(ctx, key, q); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, 5*time.Second, "the gate reads key "+key+"'s quota", func() bool {
		got, ok, err := s.gate.KeyQuota(ctx, key)
		return err == nil && ok && got == q
	})
}
