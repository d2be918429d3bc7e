package dispatch

import "context"

// GrantAndDie runs one dispatch turn for queue as a worker that then dies
// before it admits and moves what it was granted: the grants stay in state
// g for a repair pass to finish. It returns how many tasks were granted.
func (d *Dispatcher) GrantAndDie(ctx context.Context, queue string, most int) (int, error) {
	res, err := d.run(ctx, d.scripts.dispatch, queue, "dead|8|1", 3_000_000, most, 0, 0, 0)
	if err != nil {
		return 0, err
	}
	picks, _, err := readPicks(res)
	return len(picks), err
}

// RepairForTest runs a whole repair pass over queue.
func (d *Dispatcher) RepairForTest(ctx context.Context, queue string) { d.repairAll(ctx, queue) }
