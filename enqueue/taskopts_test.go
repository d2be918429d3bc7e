package enqueue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
)

// TestTaskOptions pins the asynq.Task layout that taskOptions reads. If it
// fails after an asynq upgrade, Enqueue refuses every task (errTaskLayout)
// rather than lose the task's own TaskID and ProcessAt.
func TestTaskOptions(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc string
		task *asynq.Task
		want []string
	}{
		{desc: "a task without options has none", task: asynq.NewTask("t", nil), want: nil},
		{
			desc: "NewTask's options, in order",
			task: asynq.NewTask("t", nil, asynq.TaskID("a"), asynq.Queue("q"), asynq.ProcessAt(at)),
			want: []string{`TaskID("a")`, `Queue("q")`, asynq.ProcessAt(at).String()},
		},
		{
			desc: "NewTaskWithHeaders' options",
			task: asynq.NewTaskWithHeaders("t", nil, map[string]string{"h": "v"}, asynq.MaxRetry(2)),
			want: []string{"MaxRetry(2)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			opts, err := taskOptions(tc.task)
			if err != nil {
				t.Fatalf("taskOptions: %v", err)
			}
			var got []string
			for _, o := range opts {
				got = append(got, o.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestReadScheduling(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc  string
		lists [][]asynq.Option
		want  scheduling
	}{
		{desc: "no options", want: scheduling{queue: "default"}},
		{
			desc:  "ProcessIn is relative to now",
			lists: [][]asynq.Option{{asynq.ProcessIn(time.Minute)}},
			want:  scheduling{queue: "default", at: now.Add(time.Minute)},
		},
		{
			desc:  "a later list overrides an earlier one, as Enqueue's options override the task's",
			lists: [][]asynq.Option{{asynq.TaskID("task"), asynq.Queue("a"), asynq.ProcessAt(now.Add(time.Hour))}, {asynq.TaskID("call"), asynq.Queue("b"), asynq.ProcessIn(time.Second)}},
			want:  scheduling{id: "call", queue: "b", at: now.Add(time.Second)},
		},
		{
			desc:  "within a list the last option wins",
			lists: [][]asynq.Option{{asynq.ProcessIn(time.Second), asynq.ProcessAt(now.Add(time.Hour)), nil}},
			want:  scheduling{queue: "default", at: now.Add(time.Hour)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := readScheduling(now, tc.lists...)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(scheduling{})); diff != "" {
				t.Errorf("mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestCeilSecond(t *testing.T) {
	s := time.Date(2030, 1, 1, 0, 0, 7, 0, time.UTC)
	tests := []struct {
		desc string
		in   time.Time
		want time.Time
	}{
		{desc: "a whole second stays", in: s, want: s},
		{desc: "a microsecond past goes up", in: s.Add(time.Microsecond), want: s.Add(time.Second)},
		{desc: "just under goes up", in: s.Add(-time.Nanosecond), want: s},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := ceilSecond(tc.in); !got.Equal(tc.want) {
				t.Errorf("ceilSecond(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
