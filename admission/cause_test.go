package admission_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// refusedAddr returns a loopback address where nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// An ErrUnavailable error says why Redis is unavailable: a call that ran out
// of time while go-redis retried refused dials names the refusal, not only
// "context deadline exceeded".
func TestUnavailableErrorsNameTheirCause(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: refusedAddr(t)})
	defer rdb.Close()
	q := admission.Quota{Limit: 1, Window: time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(200*time.Millisecond))
	defer gate.Close()
	quotas := admission.NewRedisQuotas(rdb, admission.WithTimeout(200*time.Millisecond))
	ctx := context.Background()

	calls := []struct {
		desc string
		call func() error
	}{
		{"Admit", func() error { _, err := gate.Admit(ctx, "acme"); return err }},
		{"AdmitID again, breaker open or not", func() error { _, err := gate.AdmitID(ctx, "acme", "id-1"); return err }},
		{"Usage", func() error { _, err := gate.Usage(ctx, "acme"); return err }},
		{"Release", func() error {
			return gate.Release(ctx, admission.Decision{Tenant: "acme", ID: "id-1", Outcome: admission.Admitted})
		}},
		{"RedisQuotas.Get", func() error { _, err := quotas.Get(ctx, "acme"); return err }},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case !errors.Is(err, admission.ErrUnavailable):
			t.Errorf("%s: err = %v, want ErrUnavailable", c.desc, err)
		case !errors.Is(err, syscall.ECONNREFUSED):
			t.Errorf("%s: err = %v, want it to match syscall.ECONNREFUSED", c.desc, err)
		case !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("%s: err = %q, want it to say connection refused", c.desc, err)
		}
	}
}

// An error that is Redis's answer is not an outage and gets no cause.
func TestAnswerErrorsGetNoCause(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: refusedAddr(t)})
	defer rdb.Close()
	q := admission.Quota{Limit: 1, Window: time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(200*time.Millisecond))
	defer gate.Close()
	_, _ = gate.Admit(context.Background(), "acme") // records a refused dial
	_, err := gate.Admit(context.Background(), "")
	if !errors.Is(err, admission.ErrInvalidTenant) || strings.Contains(err.Error(), "last error") {
		t.Errorf("Admit(\"\") = %v, want ErrInvalidTenant without a network cause", err)
	}
}

// On a cluster the cause is found in the dials of the node clients, which
// the cluster client makes: a tenant whose master is down is told why.
func TestUnavailableErrorsNameTheirCauseOnACluster(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	q := admission.Quota{Limit: 100, Window: time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(300*time.Millisecond))
	defer gate.Close()
	ctx := context.Background()
	if _, err := gate.Admit(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	master, err := rdb.MasterForKey(ctx, "admitq:{acme}:log")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n.Addr() == master.Options().Addr {
			n.Kill()
		}
	}
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, last = gate.Admit(ctx, "acme")
		if errors.Is(last, admission.ErrUnavailable) && errors.Is(last, syscall.ECONNREFUSED) {
			return
		}
	}
	t.Errorf("Admit with the tenant's master down: %v; want ErrUnavailable naming the refused connection", last)
}
