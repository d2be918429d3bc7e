package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestQuotaSourcesRefuseABadName: a Quotas answers a name that cannot be a
// tenant (empty, the default's own field, too long, a control character,
// bad UTF-8) with ErrInvalidTenant, and a KeyQuotas a bad key with
// ErrInvalidKey, never with the default quota.
func TestQuotaSourcesRefuseABadName(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	def := admission.Quota{Limit: 7, Window: time.Second}
	rq := admission.NewRedisQuotas(rdb)
	if err := rq.SetDefault(ctx, def); err != nil {
		t.Fatal(err)
	}
	static := admission.StaticQuotas{Default: &def, Keys: map[string]admission.Quota{}}
	for _, name := range []string{"", strings.Repeat("x", 257), "a\nb", "\xff"} {
		for src, qs := range map[string]admission.Quotas{"RedisQuotas": rq, "StaticQuotas": static} {
			if q, err := qs.Quota(ctx, name); !errors.Is(err, admission.ErrInvalidTenant) {
				t.Errorf("%s.Quota(%q) = %+v, %v; want ErrInvalidTenant", src, name, q, err)
			}
		}
		for src, ks := range map[string]admission.KeyQuotas{"RedisQuotas": rq, "StaticQuotas": static} {
			if q, ok, err := ks.KeyQuota(ctx, name); !errors.Is(err, admission.ErrInvalidKey) {
				t.Errorf("%s.KeyQuota(%q) = %+v, %v, %v; want ErrInvalidKey", src, name, q, ok, err)
			}
		}
	}
}

// TestNewNeedsAClientAndQuotas: New with a nil client or nil Quotas
// panics at once, naming what it needs, rather than at the first Admit.
func TestNewNeedsAClientAndQuotas(t *testing.T) {
	srv := redistest.Start(t)
	for name, mk := range map[string]func(){
		"nil Quotas": func() { admission.New(srv.Client(t), nil) },
		"nil client": func() { admission.New(nil, admission.StaticQuotas{}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "non-nil") {
					t.Errorf("New with a %s: recovered %v, want a panic naming what it needs", name, r)
				}
			}()
			mk()
		}()
	}
}
