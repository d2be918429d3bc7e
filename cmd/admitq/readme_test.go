package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

// The README's Go blocks, each between a "README:begin" and a "README:end"
// line below, so that they compile as the README shows them.
// TestReadmeGoBlocksCompileHere holds the README to this text. The
// functions are never called: they would need a Redis on 6379.

func readmeProducer(ctx context.Context, payload []byte, orderID string) {
	// README:begin
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	gate := admission.New(rdb, admission.NewRedisQuotas(rdb)) // quotas operators change live
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate) // asynq's writes share pipelines

	info, d, err := client.Enqueue(ctx, "acme", asynq.NewTask("email:send", payload), asynq.TaskID(orderID))
	var rej *enqueue.RejectedError
	switch {
	case errors.As(err, &rej):
		// Rejected: answer 429 with Retry-After: rej.RetryAfter(). Nothing was enqueued.
	case errors.Is(err, asynq.ErrTaskIDConflict):
		// A task with this ID is in the queue: this order's, put there by an earlier try.
	case enqueue.IsAmbiguous(err):
		// Perhaps enqueued (a timeout, say): retry with the same task ID, which takes no second slot.
	case err != nil:
		// Not enqueued (Redis down under FailClosed, a bad tenant, ...): the caller still holds the task.
	case d.Outcome == admission.Parked:
		log.Printf("task %s parked: it goes in at its tenant's turn (a cap, a pause or a fair queue)", info.ID)
	default:
		log.Printf("task %s %s, runs at %v", info.ID, d.Outcome, info.NextProcessAt) // admitted or deferred
	}
	// README:end
}

// charge stands for the handler's work in the README's worker: it calls a
// downstream API for the tenant and returns how long the API asked to wait
// when it throttled the tenant.
func readmeWorker(charge func(ctx context.Context, tenant string, payload []byte) (time.Duration, error)) {
	// README:begin
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	gate := admission.New(rdb, admission.NewRedisQuotas(rdb)) // the same quotas as the producers'
	defer gate.Close()

	w := worker.New(asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}, worker.Config{Gate: gate, Concurrency: 20})
	err := w.Run(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		throttle, err := charge(ctx, worker.Tenant(ctx), t.Payload())
		if throttle > 0 {
			return worker.Throttled(throttle) // retried then, not a failure; the tenant's waiting tasks wait too
		}
		return err
	}))
	if err != nil {
		log.Fatal(err) // Run returns once SIGINT or SIGTERM has shut the worker down
	}
	// README:end
}

func readmeGate(ctx context.Context, rdb *redis.Client) {
	// README:begin
	gate := admission.New(rdb, admission.StaticQuotas{Default: &admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Minute}})
	defer gate.Close()
	for range 5 {
		d, err := gate.Admit(ctx, "acme")
		if err != nil {
			log.Fatal(err) // Redis unavailable (FailClosed), or a bad tenant or quota
		}
		fmt.Printf("%s, wait %v\n", d.Outcome, d.Delay().Round(time.Second))
	}
	// admitted, wait 0s
	// admitted, wait 0s
	// deferred, wait 1m0s
	// deferred, wait 1m0s
	// rejected, wait 1m0s
	// README:end
}

var (
	readmeGoBlock = regexp.MustCompile("(?s)\n```go\n(.*?)\n```\n")
	readmeMarked  = regexp.MustCompile(`(?s)\n\t// README:begin\n(.*?)\n\t// README:end\n`)
)

// TestReadmeGoBlocksCompileHere: every Go block of the README is, in order,
// one of the marked blocks above (less one tab of indent), so what the
// README shows compiles with this package's tests. The gate's output in
// the README is admission's Example's (ExampleOutcome and Example check it
// against a Redis).
// The README's programs, held here so that they compile with the package.
var _ = []any{readmeProducer, readmeWorker, readmeGate}

func TestReadmeGoBlocksCompileHere(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range readmeMarked.FindAllStringSubmatch(string(self), -1) {
		lines := strings.Split(m[1], "\n")
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(l, "\t")
		}
		want = append(want, strings.Join(lines, "\n"))
	}
	var got []string
	for _, m := range readmeGoBlock.FindAllStringSubmatch(string(readme), -1) {
		got = append(got, m[1])
	}
	if len(got) != len(want) {
		t.Fatalf("README.md has %d Go blocks, readme_test.go compiles %d: add the new block to readme_test.go", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("README.md's Go block %d differs from the one readme_test.go compiles:\nREADME:\n%s\n\nreadme_test.go:\n%s", i+1, got[i], want[i])
		}
	}
}

// TestReadmeHoldsNoHistory: the user docs state facts, not the history of
// how they came to be.
func TestReadmeHoldsNoHistory(t *testing.T) {
	t.Parallel()
	files := []string{"../../README.md"}
	docs, err := os.ReadDir("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range docs {
		if strings.HasSuffix(e.Name(), ".md") {
			files = append(files, "../../docs/"+e.Name())
		}
	}
	history := regexp.MustCompile(`(?i)issue [0-9]+|this round|not met|out of reach`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if history.MatchString(line) {
				t.Errorf("%s:%d tells history: %s", f, i+1, line)
			}
		}
	}
	readme, _ := os.ReadFile("../../README.md")
	if n := strings.Count(string(readme), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the detail to docs/", n)
	}
}
