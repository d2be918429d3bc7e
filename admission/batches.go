package admission

import (
	"context"
	"time"

	"github.com/admitq/admitq/internal/freshid"
)

// Batch is one tenant's requests for AdmitBatches: its IDs and when the
// work will first run, as AdmitBatchAt takes them (a zero NotBefore: as
// soon as admitted).
type Batch struct {
	Tenant    string
	IDs       []string
	NotBefore time.Time
}

// BatchResult is AdmitBatches' answer to one Batch: its decisions, in the
// order of its IDs, or the error AdmitBatchAt would have returned for it.
type BatchResult struct {
	Decisions []Decision
	Err       error
}

// AdmitBatches decides each of batches as AdmitBatchAt would, and returns
// their results in the same order. What it must ask Redis, it asks
// together: one pipeline a Redis server (on a cluster, a master), which
// carries one call of the admission script for up to MaxBatch IDs, where
// the same batches asked from as many goroutines would start a pipeline
// each while fewer than two are out. A dispatcher that admits many
// tenants' tasks at once pays one script call a server for them. A
// tenant's rejection held by the deny cache answers its batch at once; one
// that is being asked again is asked again for this batch too, rather than
// waited for. A batch's error is its own; the others are decided all the
// same.
func (g *Gate) AdmitBatches(ctx context.Context, batches []Batch) []BatchResult {
	out := make([]BatchResult, len(batches))
	if err := g.made(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	var (
		asks    []*ask
		preps   []prepared
		budgets []time.Duration // what each ask's decision has left for Redis, once prepared
		at      []int           // each ask's batch
	)
	for i, b := range batches {
		ids := b.IDs
		if ids == nil {
			ids = []string{} // as AdmitBatchAt: nil asks for a generated ID
		}
		a, ds, ok, err := g.asking(ctx, b.Tenant, ids, b.NotBefore, freshid.MadeAll(ctx, ids))
		var p prepared
		if ok {
			// Sent only once every batch is prepared: its deny cache
			// lookup must not wait for a probe that may be one of these.
			a.together = true
			var done bool
			if ds, done, err = g.prepare(ctx, &a, &p); !done {
				asks, preps, budgets, at = append(asks, &a), append(preps, p), append(budgets, p.dl.left()), append(at, i)
				continue
			}
		}
		out[i] = BatchResult{Decisions: ds, Err: g.causes.explain(err)}
	}
	if len(asks) == 0 {
		return out
	}
	rs := make([]*request, len(asks))
	for j, a := range asks {
		rs[j] = a.request()
		rs[j].budget = budgets[j]
	}
	dss, errs := g.commit.doAll(ctx, rs, g.forget)
	for j, a := range asks {
		var hint time.Time
		err := errs[j]
		if err != nil {
			// An abandoned request may still be answered meanwhile: only
			// an answered one's fields are the caller's to read (remote).
			err = callError(ctx, "admit", a.tenant, err)
		} else {
			hint = rs[j].hint
		}
		ds, err := g.conclude(a, &preps[j], dss[j], hint, err)
		out[at[j]] = BatchResult{Decisions: ds, Err: g.causes.explain(err)}
	}
	return out
}
