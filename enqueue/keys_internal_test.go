package enqueue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

func TestKeysAndPriorityOptions(t *testing.T) {
	tests := []struct {
		desc      string
		opt       asynq.Option
		wantStr   string
		wantType  asynq.OptionType
		wantValue any
	}{
		{"Keys names its keys in order", Keys("b", "a", "b"), `Keys("b", "a", "b")`, KeysOpt, []string{"b", "a", "b"}},
		{"Keys() has none", Keys(), `Keys()`, KeysOpt, []string(nil)},
		{"Keys quotes what it holds", Keys("a\nb"), `Keys("a\nb")`, KeysOpt, []string{"a\nb"}},
		{"Priority", Priority(-7), "Priority(-7)", PriorityOpt, -7},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.opt.String(); got != tc.wantStr {
				t.Errorf("String() = %q, want %q", got, tc.wantStr)
			}
			if got := tc.opt.Type(); got != tc.wantType {
				t.Errorf("Type() = %v, want %v", got, tc.wantType)
			}
			if diff := cmp.Diff(tc.wantValue, tc.opt.Value()); diff != "" {
				t.Errorf("Value() mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}

// The types must never be taken for one of asynq's: readScheduling and
// checkOptions tell options apart by Type.
func TestOptionTypesAreNotAsynqs(t *testing.T) {
	for _, o := range []asynq.Option{asynq.MaxRetry(1), asynq.Queue("q"), asynq.Timeout(1), asynq.Deadline(time.Now()),
		asynq.Unique(time.Second), asynq.ProcessAt(time.Now()), asynq.ProcessIn(1), asynq.TaskID("x"),
		asynq.Retention(1), asynq.Group("g")} {
		if o.Type() == KeysOpt || o.Type() == PriorityOpt {
			t.Errorf("asynq's %v has Type %v, as Keys or Priority does", o, o.Type())
		}
	}
	if KeysOpt == PriorityOpt {
		t.Error("KeysOpt == PriorityOpt")
	}
}

// Keys and Priority are read like asynq's options: the task's own first,
// then Enqueue's, the last of each kind winning. Keys of several options
// are not merged.
func TestReadKeysAndPriority(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc         string
		lists        [][]asynq.Option
		wantKeys     []string
		wantPriority int
	}{
		{desc: "no options: no keys, priority 0"},
		{
			desc:         "keys are sorted and each named once",
			lists:        [][]asynq.Option{{Keys("db", "api:stripe", "db"), Priority(3)}},
			wantKeys:     []string{"api:stripe", "db"},
			wantPriority: 3,
		},
		{
			desc:         "Enqueue's options win over the task's",
			lists:        [][]asynq.Option{{Keys("task"), Priority(1)}, {Keys("call"), Priority(2)}},
			wantKeys:     []string{"call"},
			wantPriority: 2,
		},
		{
			desc:         "the task's stand when Enqueue gives none",
			lists:        [][]asynq.Option{{Keys("task"), Priority(-1)}, {asynq.Queue("q")}},
			wantKeys:     []string{"task"},
			wantPriority: -1,
		},
		{
			desc:     "within a list the last wins, and keys are not merged",
			lists:    [][]asynq.Option{{Keys("a", "b"), Keys("c"), nil}},
			wantKeys: []string{"c"},
		},
		{
			desc:  "Keys() takes the task's keys away",
			lists: [][]asynq.Option{{Keys("task")}, {Keys()}},
		},
		{
			desc:         "Priority(0) overrides",
			lists:        [][]asynq.Option{{Priority(9)}, {Priority(0)}},
			wantPriority: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := readScheduling(now, tc.lists...)
			if diff := cmp.Diff(tc.wantKeys, got.keys); diff != "" {
				t.Errorf("keys mismatch (-want,+got):\n%s", diff)
			}
			if got.priority != tc.wantPriority {
				t.Errorf("priority = %d, want %d", got.priority, tc.wantPriority)
			}
			if got.queue == "" {
				t.Error("queue is empty: Keys or Priority was read as another option")
			}
		})
	}
}

func TestCheckKeysAndPriority(t *testing.T) {
	nine := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
	tests := []struct {
		desc    string
		opts    []asynq.Option
		wantKey bool   // the error matches admission.ErrInvalidKey too
		want    string // in the error's text; "" means no error
	}{
		{desc: "a key and a priority in range", opts: []asynq.Option{Keys("api:stripe"), Priority(MaxPriority), Priority(MinPriority)}},
		{desc: "MaxKeys keys", opts: []asynq.Option{Keys(nine[:MaxKeys]...)}},
		{desc: "a key named twice counts once", opts: []asynq.Option{Keys(append(nine[:MaxKeys:MaxKeys], "k1")...)}},
		{desc: "no keys", opts: []asynq.Option{Keys()}},
		{desc: "a key of 256 bytes", opts: []asynq.Option{Keys(strings.Repeat("k", admission.MaxKeyLen))}},
		{desc: "an empty key", opts: []asynq.Option{Keys("a", "")}, wantKey: true, want: "empty"},
		{desc: "a key with a control character", opts: []asynq.Option{Keys("a\tb")}, wantKey: true, want: "control character"},
		{desc: "a key of invalid UTF-8", opts: []asynq.Option{Keys("a\xffb")}, wantKey: true, want: "UTF-8"},
		{desc: "a key over 256 bytes", opts: []asynq.Option{Keys(strings.Repeat("k", admission.MaxKeyLen+1))}, wantKey: true, want: "257 bytes"},
		{desc: "more than MaxKeys distinct keys", opts: []asynq.Option{Keys(nine...)}, want: "9 distinct keys"},
		{desc: "a priority above MaxPriority", opts: []asynq.Option{Priority(MaxPriority + 1)}, want: "Priority(1001)"},
		{desc: "a priority below MinPriority", opts: []asynq.Option{Priority(MinPriority - 1)}, want: "Priority(-1001)"},
		{desc: "a bad option counts even when a later one overrides it", opts: []asynq.Option{Priority(5000), Priority(1)}, want: "Priority(5000)"},
		{desc: "asynq's own refusals match ErrInvalidOption too", opts: []asynq.Option{asynq.Queue(" ")}, want: "blank"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := checkOptions(tc.opts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkOptions: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("checkOptions: %v, want an error matching ErrInvalidOption", err)
			}
			if got := errors.Is(err, admission.ErrInvalidKey); got != tc.wantKey {
				t.Errorf("errors.Is(%v, admission.ErrInvalidKey) = %v, want %v", err, got, tc.wantKey)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// asynq never sees Keys or Priority, from the task or from Enqueue; every
// other option reaches it in order.
func TestPrepareStripsKeysAndPriority(t *testing.T) {
	c := &Client{newID: func() string { return "made" }}
	task := asynq.NewTask("t", nil, Keys("a"), asynq.MaxRetry(2), Priority(1))
	p, err := c.prepare("acme", task, []asynq.Option{asynq.Queue("q"), Keys("b", "c"), Priority(4), asynq.Timeout(time.Minute)})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	var got []string
	for _, o := range p.opts {
		got = append(got, o.String())
	}
	want := []string{"MaxRetry(2)", `Queue("q")`, "Timeout(1m0s)", `TaskID("made")`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options handed to asynq mismatch (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b", "c"}, p.sched.keys); diff != "" {
		t.Errorf("keys mismatch (-want,+got):\n%s", diff)
	}
	if p.sched.priority != 4 {
		t.Errorf("priority = %d, want 4", p.sched.priority)
	}
	if p.sched.queue != "q" {
		t.Errorf("queue = %q, want q", p.sched.queue)
	}
}

func TestKeysHeaderValue(t *testing.T) {
	if got := keysHeader([]string{"api:stripe", "db"}); got != "api:stripe\ndb" {
		t.Errorf("keysHeader = %q, want %q", got, "api:stripe\ndb")
	}
}
