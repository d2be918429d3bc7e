package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// takeStack is a queue "q" of tasks t1…tn on a real Redis and a takeAhead
// for a worker of concurrency 4 in front of it.
type takeStack struct {
	t   *testing.T
	rdb *redis.Client
	a   *takeAhead
}

func newTakeStack(t *testing.T, n int) *takeStack {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	for i := range n {
		id := "t" + string(rune('1'+i))
		if _, err := client.Enqueue(asynq.NewTask("kind", []byte(id)), asynq.Queue("q"), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	return &takeStack{t: t, rdb: rdb, a: newTakeAhead(rdb, "q", 4)}
}

// look is one of asynq's looks into q through the takeAhead: the ID of the
// task it handed out ("" when it found none).
func (s *takeStack) look() string {
	s.t.Helper()
	keys := []string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active", "asynq:{q}:lease"}
	asynqs := func() *redis.Cmd {
		s.t.Fatal("the look ran asynq's own script")
		return nil
	}
	msg, err := s.a.look(context.Background(), "q", keys, []any{time.Now().Add(time.Minute).Unix(), "asynq:{q}:t:"}, asynqs).Text()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		s.t.Fatal(err)
	}
	ids, err := s.rdb.LRange(context.Background(), "asynq:{q}:active", 0, -1).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, id := range ids {
		if m, _ := s.rdb.HGet(context.Background(), "asynq:{q}:t:"+id, "msg").Result(); m == msg {
			return id
		}
	}
	s.t.Fatalf("a look handed out a message of no active task")
	return ""
}

// lists returns q's pending list (the next taken last) and active list.
func (s *takeStack) lists() (pending, active []string) {
	s.t.Helper()
	ctx := context.Background()
	pending, err1 := s.rdb.LRange(ctx, "asynq:{q}:pending", 0, -1).Result()
	active, err2 := s.rdb.LRange(ctx, "asynq:{q}:active", 0, -1).Result()
	if err := errors.Join(err1, err2); err != nil {
		s.t.Fatal(err)
	}
	return pending, active
}

func (s *takeStack) want(step string, pending, active []string) {
	s.t.Helper()
	p, a := s.lists()
	if diff := cmp.Diff([2][]string{pending, active}, [2][]string{p, a}); diff != "" {
		s.t.Errorf("%s: pending and active lists (-want +got):\n%s", step, diff)
	}
}

// A look takes a task for each free slot, hands out the first and the
// rest to the next looks without Redis, in the order asynq would have
// taken them; a slot counts free when asynq's next script on its task
// ran; the look after a hand-off goes to Redis first; and what is given
// back goes where asynq takes from next.
func TestTakeAheadTakesForTheFreeSlots(t *testing.T) {
	s := newTakeStack(t, 7)
	if got := s.look(); got != "t1" {
		t.Fatalf("first look handed out %q, want t1", got)
	}
	s.want("a look with 4 slots free", []string{"t7", "t6", "t5"}, []string{"t4", "t3", "t2", "t1"})
	for _, want := range []string{"t2", "t3"} {
		if got := s.look(); got != want {
			t.Errorf("a look handed out %q, want %q taken ahead", got, want)
		}
	}
	s.want("looks answered from the tasks taken ahead", []string{"t7", "t6", "t5"}, []string{"t4", "t3", "t2", "t1"})

	// asynq's scripts took t1 and t3 out of the active list (one names
	// the task key first, one later): two slots free, one of them t4's
	// (taken ahead). A script on other keys frees nothing. The look after
	// a hand-off takes from Redis for the other two, and what it takes
	// goes before t4.
	s.a.freed([]string{"asynq:{q}:t:t1", "asynq:{q}:active", "asynq:{q}:lease"})
	s.a.freed([]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:t3"})
	s.a.freed([]string{"asynq:{q}:scheduled", "asynq:{q}:pending"})
	s.a.front()
	if got := s.look(); got != "t5" {
		t.Errorf("a front look handed out %q, want t5 from Redis", got)
	}
	s.want("a front look", []string{"t7"}, []string{"t6", "t5", "t4", "t3", "t2", "t1"})
	for _, want := range []string{"t6", "t4"} {
		if got := s.look(); got != want {
			t.Errorf("a look handed out %q, want %q taken ahead", got, want)
		}
	}
	// All four slots held: asynq looks only with a slot free, so a count
	// that says none is off; the oldest is forgotten, and the look takes
	// one.
	if got := s.look(); got != "t7" {
		t.Errorf("a look with no slot counted free handed out %q, want t7", got)
	}
	s.a.mu.Lock()
	_, kept := s.a.held["asynq:{q}:t:t2"]
	n := len(s.a.held)
	s.a.mu.Unlock()
	if kept || n != 4 {
		t.Errorf("after that look: %d slots held, t2's kept: %v; want 4, the oldest (t2's) forgotten", n, kept)
	}
	s.a.freed([]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:t2"})
	if got := s.look(); got != "" {
		t.Errorf("a look into an empty queue handed out %q", got)
	}
}

func TestTakeAheadGivesBackWhatWaitsTooLong(t *testing.T) {
	s := newTakeStack(t, 6)
	if got := s.look(); got != "t1" {
		t.Fatalf("first look handed out %q, want t1", got)
	}
	ctx := context.Background()
	if err := s.a.giveBack(time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.want("nothing waited past the cutoff", []string{"t6", "t5"}, []string{"t4", "t3", "t2", "t1"})
	if err := s.a.giveBack(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	s.want("all waited past the cutoff", []string{"t6", "t5", "t4", "t3", "t2"}, []string{"t1"})
	for _, id := range []string{"t2", "t3", "t4"} {
		st, err := s.rdb.HGet(ctx, "asynq:{q}:t:"+id, "state").Result()
		if err != nil || st != "pending" {
			t.Errorf("%s given back: state %q, %v; want pending", id, st, err)
		}
		if err := s.rdb.ZScore(ctx, "asynq:{q}:lease", id).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("%s given back keeps a lease (%v)", id, err)
		}
	}
	if got := s.look(); got != "t2" {
		t.Errorf("the look after giving back handed out %q, want t2, as asynq would", got)
	}
	if err := s.a.giveBack(time.Time{}); err != nil {
		t.Fatal(err)
	}
	s.want("all given back", []string{"t6", "t5", "t4", "t3"}, []string{"t2", "t1"})
}

// A look after a hand-off whose task an earlier look took finds Redis
// empty and hands out a task taken ahead rather than none; a look into
// another queue, or with arguments of another asynq, is asynq's own.
func TestTakeAheadLooksItDoesNotKnowAreAsynqs(t *testing.T) {
	s := newTakeStack(t, 3)
	if got := s.look(); got != "t1" {
		t.Fatalf("first look handed out %q, want t1", got)
	}
	s.a.front()
	if got := s.look(); got != "t2" {
		t.Errorf("the look after a hand-off into an empty queue handed out %q, want t2 taken ahead", got)
	}
	if got := s.look(); got != "t3" {
		t.Errorf("the next look handed out %q, want t3 taken ahead", got)
	}

	ran := 0
	own := func() *redis.Cmd {
		ran++
		cmd := redis.NewCmd(context.Background())
		cmd.SetErr(redis.Nil)
		return cmd
	}
	keys := []string{"asynq:{r}:pending", "asynq:{r}:paused", "asynq:{r}:active", "asynq:{r}:lease"}
	_ = s.a.look(context.Background(), "r", keys, []any{int64(1), "asynq:{r}:t:"}, own)
	_ = s.a.look(context.Background(), "q", keys, []any{int64(1)}, own)
	if ran != 2 {
		t.Errorf("asynq's own script ran %d times for a look into another queue and one with other arguments, want 2", ran)
	}
}

// Tasks a giving back could not put back (Redis did not answer) stay
// taken ahead for the next try, which puts them back.
func TestTakeAheadKeepsWhatItCouldNotGiveBack(t *testing.T) {
	s := newTakeStack(t, 4)
	if got := s.look(); got != "t1" {
		t.Fatalf("first look handed out %q, want t1", got)
	}
	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer gone.Close()
	a := s.a
	a.rdb = gone
	if err := a.giveBack(time.Time{}); err == nil {
		t.Fatal("giving back through a Redis that does not answer: no error")
	}
	if len(a.ahead) != 3 {
		t.Fatalf("%d tasks taken ahead after a failed giving back, want the 3 kept", len(a.ahead))
	}
	a.rdb = s.rdb
	if err := a.giveBack(time.Time{}); err != nil {
		t.Fatal(err)
	}
	s.want("the second try", []string{"t4", "t3", "t2"}, []string{"t1"})
}

// Two hand-offs at once: the look after the first takes from Redis for
// both freed slots, and the look after the second hands out the task it
// took behind its own, which was at the front, rather than take the next
// from Redis and leave that one waiting for a slot that is not free.
func TestTakeAheadHandsOffTwoAtOnce(t *testing.T) {
	s := newTakeStack(t, 8)
	for _, want := range []string{"t1", "t2", "t3", "t4"} {
		if got := s.look(); got != want {
			t.Fatalf("a look handed out %q, want %q", got, want)
		}
	}
	s.a.freed([]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:t1"})
	s.a.freed([]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:t2"})
	s.a.front()
	s.a.front()
	for _, want := range []string{"t5", "t6"} {
		if got := s.look(); got != want {
			t.Errorf("the look after a hand-off handed out %q, want %q", got, want)
		}
	}
	s.want("two hand-offs", []string{"t8", "t7"}, []string{"t6", "t5", "t4", "t3", "t2", "t1"})
}
