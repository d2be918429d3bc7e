package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
)

// TestKeyedTasksShowOnTheKeysPage: with a fair worker serving the queue and
// keyed tasks in it, the keys page shows what the dispatcher holds: a key
// at its cap with the rest waiting, a paused key, a key a downstream
// throttle holds, and a key's page its own rows only.
func TestKeyedTasksShowOnTheKeysPage(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: admission.NoLimit})
	st.setKey(t, "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	st.setKey(t, "smtp", admission.Quota{Limit: admission.NoLimit, Paused: true})
	// A fair worker that runs nothing: what goes in stays in flight.
	hold, err := dispatch.New(st.rdb, st.gate, nil).Serve(dispatch.Worker{Queues: []string{testQueue}, Concurrency: 10, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	send := func(n int, key string) string {
		t.Helper()
		var id string
		for range n {
			info, _, err := st.client.Enqueue(t.Context(), "acme", asynq.NewTask("job", nil), asynq.Queue(testQueue), enqueue.Keys(key))
			if err != nil {
				t.Fatalf("enqueue with key %s: %v", key, err)
			}
			id = info.ID
		}
		return id
	}
	send(3, "api:stripe")
	send(2, "smtp")
	db := send(1, "db")
	d, hs := st.dashboard(t, Config{})

	// wait waits until the queue's keys are want, with how long a key is
	// held left out: that is the dispatcher's.
	wait := func(what string, want []keyRow) {
		t.Helper()
		var got []keyRow
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			d.forgetDispatch()
			_, v := getKeys(t, hs.URL, "")
			got = nil
			for _, q := range v.Queues {
				if q.Queue == testQueue {
					got = q.Keys
				}
			}
			for i := range got {
				got[i].HeldMs = 0
			}
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: queue %s's keys after 10s (-want,+got):\n%s", what, testQueue, cmp.Diff(want, got))
			}
		}
	}
	row := func(k string) keyRow { return keyRow{Key: k, Shown: k, Link: "/keys/" + k} }
	stripe := row("api:stripe")
	stripe.InFlight, stripe.Cap, stripe.AtCap, stripe.Waiting = 1, 1, true, 2
	smtp := row("smtp")
	smtp.Waiting, smtp.Paused = 2, true
	dbRow := row("db")
	dbRow.InFlight = 1
	wait("keyed tasks in", []keyRow{stripe, dbRow, smtp})
	// The db task, in flight, is throttled downstream on its key, as a
	// worker's handler returning worker.ThrottledKey("db", time.Minute)
	// reports it.
	hold.ThrottledKey(testQueue, "acme", db, "db", time.Millisecond, time.Minute)
	dbRow.Held = true
	wait("db throttled", []keyRow{stripe, dbRow, smtp})
	if _, v := getKeys(t, hs.URL, "?k=smtp"); len(v.Queues) != 1 || len(v.Queues[0].Keys) != 1 || v.Queues[0].Keys[0].Key != "smtp" {
		t.Errorf("smtp's page: %+v, want its own row only", v.Queues)
	}
}
