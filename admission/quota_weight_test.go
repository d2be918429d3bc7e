package admission_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

func TestWeightIsValidatedAndRoundTrips(t *testing.T) {
	base := admission.Quota{Limit: 10, Window: time.Second}
	for _, w := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1), admission.MaxWeight + 1} {
		q := base
		q.Weight = w
		err := q.Validate()
		if !errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), "Weight") {
			t.Errorf("Weight %v: Validate() = %v, want ErrInvalidQuota naming Weight", w, err)
		}
	}
	for _, w := range []float64{0, 0.5, 1, 3, admission.MaxWeight} {
		q := base
		q.Weight = w
		b, err := q.MarshalText()
		if err != nil {
			t.Fatalf("Weight %v: MarshalText: %v", w, err)
		}
		var got admission.Quota
		if err := got.UnmarshalText(b); err != nil || got != q {
			t.Errorf("Weight %v: round trip through %s = %+v, %v", w, b, got, err)
		}
	}
	if got := base.EffectiveWeight(); got != 1 {
		t.Errorf("EffectiveWeight of Weight 0 = %v, want 1", got)
	}
}
