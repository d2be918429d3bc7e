package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// A key's resume reaches its queue within about a second, as a tenant's
// does, however many other keys have tasks waiting there: here 2,000 keys
// of a paused tenant's tasks, and no new task of the resumed key to carry
// the news.
func TestKeyResumeReachesTheQueueAmongManyKeys(t *testing.T) {
	s := newStack(t, generous)
	paused := admission.Quota{Limit: admission.NoLimit, Paused: true}
	s.setQuota("x", paused)
	s.setKey("pz", paused)
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, true)
	time.Sleep(1100 * time.Millisecond)
	d := dispatch.New(s.rdb, s.gate, nil)
	for i := range 2000 {
		task := dispatch.Task{Queue: "default", Tenant: "x", ID: fmt.Sprint("x", i), Keys: []dispatch.Key{{Name: fmt.Sprint("k", i)}}}
		if _, err := d.Park(context.Background(), task, paused); err != nil {
			t.Fatal(err)
		}
	}
	for r := range 3 {
		id := fmt.Sprint("b", r)
		w.put(t, s.client, "default", "b", id, "1ms", []string{"pz"})
		time.Sleep(600 * time.Millisecond)
		start := time.Now()
		s.setKey("pz", admission.Quota{Limit: admission.NoLimit})
		w.waitRuns(t, []string{id}, 60*time.Second)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("resume %d: key pz's resume took %v to let its task in among 2,000 keys; want about a second", r+1, took)
		}
		s.setKey("pz", paused)
		time.Sleep(time.Second) // the pause reaches the queue, or b's next task brings it
	}
}
