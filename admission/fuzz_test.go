package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// Fuzz tests. make test runs each for a few seconds (FUZZTIME); make fuzz
// runs them for longer. Plain go test runs the seeds and testdata/fuzz.

// FuzzTenant: ValidateTenant never panics, and accepts exactly the names of
// 1 to 256 bytes of valid UTF-8 without a control character; what it
// refuses wraps ErrInvalidTenant. ValidateKey accepts the same names, and
// refuses the others with ErrInvalidKey.
func FuzzTenant(f *testing.F) {
	for _, s := range []string{
		"", "a", "acme", "tenant-42", "ü", "日本", "a b", "\u200b", // zero width space: a format char, not control
		"\x00", "a\nb", "\t", "\x7f", "\u0085", "\u009f", // C0, DEL and C1 controls
		"\xff", "a\xc3", "\xed\xa0\x80", // invalid UTF-8, a surrogate
		strings.Repeat("a", 256), strings.Repeat("a", 257), strings.Repeat("a", 255) + "é",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tenant string) {
		err := ValidateTenant(tenant)
		want := len(tenant) >= 1 && len(tenant) <= MaxTenantLen && utf8.ValidString(tenant) &&
			!strings.ContainsFunc(tenant, unicode.IsControl)
		switch {
		case want && err != nil:
			t.Fatalf("ValidateTenant(%q) = %v, want nil", tenant, err)
		case !want && !errors.Is(err, ErrInvalidTenant):
			t.Fatalf("ValidateTenant(%q) = %v, want ErrInvalidTenant", tenant, err)
		case want != (ValidateKey(tenant) == nil):
			t.Fatalf("ValidateKey(%q) = %v, but ValidateTenant = %v: keys follow the tenants' rules", tenant, ValidateKey(tenant), err)
		case !want && !errors.Is(ValidateKey(tenant), ErrInvalidKey):
			t.Fatalf("ValidateKey(%q) = %v, want ErrInvalidKey", tenant, ValidateKey(tenant))
		case want && !strings.Contains(logKey("p", tenant), "{"+tenant+"}"):
			t.Fatalf("logKey(%q) = %q, want the tenant as its hash tag", tenant, logKey("p", tenant))
		}
	})
}

// FuzzQuota: UnmarshalText never panics on any bytes, and refuses with
// ErrInvalidQuota what it does not accept; what it accepts is valid JSON, a
// valid quota, and comes back from MarshalText to the same quota. A quota
// built from any field values either fails Validate and MarshalText alike,
// with ErrInvalidQuota, or round-trips exactly.
func FuzzQuota(f *testing.F) {
	f.Add([]byte(`{"limit":100,"window":"1m0s","max_delay":"30s"}`), 100, int64(time.Minute), int64(30*time.Second), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"1ms"}`), 1, int64(time.Millisecond), int64(0), uint8(1))
	f.Add([]byte(`{"limit":5,"window":"1s","mode":"counter"}`), 5, int64(time.Second), int64(time.Hour), uint8(1))
	f.Add([]byte(`{"limit":0,"window":"1s"}`), 0, int64(time.Second), int64(0), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"999us"}`), 1, int64(999*time.Microsecond), int64(-1), uint8(2))
	f.Add([]byte(`{"limit":1,"window":"1s","max_delay":"-1s"}`), math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"1s","extra":1}`), -1, int64(-1), int64(0), uint8(0))
	f.Add([]byte(`{"limit":1e3,"window":"1s"}`), 1, int64(1500), int64(0), uint8(0))
	f.Add([]byte(`{"limit":"1","window":1}`), 1, int64(time.Second+1), int64(1), uint8(0))
	f.Add([]byte(`null`), 1, int64(2562047*time.Hour), int64(1), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"1s"} x`), 1, int64(time.Second), int64(0), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"1s"}{}`), 1, int64(time.Second), int64(0), uint8(0))
	f.Add([]byte(`{"limit":1,"window":"1s","mode":"fast"}`), 1, int64(time.Second), int64(0), uint8(0))
	f.Add([]byte("\xff\xfe"), 1, int64(time.Second), int64(0), uint8(0))
	// NoLimit, with and without its ignored window, and paused.
	f.Add([]byte(`{"limit":-1,"window":"0s","paused":true}`), NoLimit, int64(0), int64(0), uint8(1))
	f.Add([]byte(`{"limit":-1,"window":"-1s"}`), NoLimit, int64(-1), int64(time.Minute), uint8(0))
	f.Add([]byte(`{"limit":-1,"window":"1ns","mode":"counter","max_in_flight":3,"paused":false}`), -2, int64(1), int64(0), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, limit int, window, maxDelay int64, mode uint8) {
		var q Quota
		if err := q.UnmarshalText(b); err != nil {
			if !errors.Is(err, ErrInvalidQuota) {
				t.Fatalf("UnmarshalText(%q) = %v, want ErrInvalidQuota", b, err)
			}
		} else {
			if !json.Valid(b) {
				t.Fatalf("UnmarshalText accepted %q, which is not JSON, as %v", b, q)
			}
			if err := q.Validate(); err != nil {
				t.Fatalf("UnmarshalText(%q) gave an invalid quota %+v: %v", b, q, err)
			}
			roundTrip(t, q)
		}

		q = Quota{Limit: limit, Window: time.Duration(window), MaxDelay: time.Duration(maxDelay), Mode: Mode(mode % 3)}
		if verr := q.Validate(); verr != nil {
			if !errors.Is(verr, ErrInvalidQuota) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidQuota", q, verr)
			}
			if _, err := q.MarshalText(); !errors.Is(err, ErrInvalidQuota) {
				t.Fatalf("MarshalText(%+v) = %v, want ErrInvalidQuota like Validate", q, err)
			}
			return
		}
		roundTrip(t, q)
	})
}

// roundTrip checks that a valid q survives MarshalText and UnmarshalText
// exactly.
func roundTrip(t *testing.T, q Quota) {
	t.Helper()
	b, err := q.MarshalText()
	if err != nil {
		t.Fatalf("MarshalText(%+v): %v", q, err)
	}
	var got Quota
	if err := got.UnmarshalText(b); err != nil {
		t.Fatalf("UnmarshalText(MarshalText(%+v) = %s): %v", q, b, err)
	}
	if got != q {
		t.Fatalf("round trip of %+v through %s gave %+v", q, b, got)
	}
}

// FuzzRedisQuotas: whatever bytes an operator writes by hand into the quota
// hash (HSET), RedisQuotas never panics: Get, GetDefault, List and Quota
// give the quota those bytes decode to, or an error wrapping
// ErrInvalidQuota. A valid quota set through Set comes back exactly.
func FuzzRedisQuotas(f *testing.F) {
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { rdb.Close() })
	for _, s := range []string{
		`{"limit":100,"window":"1m0s","max_delay":"30s"}`, `{"limit":3,"window":"10s","mode":"counter"}`,
		``, ` `, `{}`, `null`, `[]`, `{"limit":-1,"window":"1s"}`, `{"limit":1,"window":"forever"}`,
		`{"limit":1,"window":"1s","max_delay":"soon"}`, `{"limit":1,"window":"1s"}}`, `100/1m`, "\x00\xff",
		`{"limit":-1,"window":"0s","max_in_flight":4,"paused":true}`, `{"limit":5,"window":"1s","paused":"yes"}`,
		strings.Repeat(`{"limit":1,"window":"1s"}`, 50),
	} {
		f.Add([]byte(s), 7, int64(time.Second))
	}
	f.Add([]byte(`{"limit":-1,"window":"0s"}`), NoLimit, int64(0))
	f.Fuzz(func(t *testing.T, v []byte, limit int, window int64) {
		ctx := context.Background()
		const prefix = "fuzz"
		key := quotasKey(prefix)
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		var want Quota
		werr := want.UnmarshalText(v)
		check := func(op string, got Quota, err error) {
			t.Helper()
			switch {
			case werr == nil && (err != nil || got != want):
				t.Fatalf("%s of %q = %+v, %v; want %+v", op, v, got, err, want)
			case werr != nil && !errors.Is(err, ErrInvalidQuota):
				t.Fatalf("%s of %q = %+v, %v; want ErrInvalidQuota", op, v, got, err)
			}
		}

		// As a tenant's own quota, then as the default.
		if err := rdb.HSet(ctx, key, "t", v).Err(); err != nil {
			t.Fatal(err)
		}
		store := NewRedisQuotas(rdb, WithPrefix(prefix))
		q, err := store.Get(ctx, "t")
		check("Get", q, err)
		q, err = store.Quota(ctx, "t")
		check("Quota", q, err)
		all, err := store.List(ctx)
		check("List", all.Tenants["t"], err)

		if err := rdb.HDel(ctx, key, "t").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, key, defaultField, v).Err(); err != nil {
			t.Fatal(err)
		}
		store = NewRedisQuotas(rdb, WithPrefix(prefix))
		q, err = store.GetDefault(ctx)
		check("GetDefault", q, err)
		q, err = store.Quota(ctx, "other")
		check("Quota of a tenant with none", q, err)
		all, err = store.List(ctx)
		var def Quota
		if all.Default != nil {
			def = *all.Default
		}
		check("List", def, err)

		// A valid quota set through the store comes back exactly.
		set := Quota{Limit: limit, Window: time.Duration(window)}
		if err := store.Set(ctx, "s", set); err != nil {
			if set.Validate() == nil || !errors.Is(err, ErrInvalidQuota) {
				t.Fatalf("Set(%+v) = %v", set, err)
			}
			return
		}
		if got, err := store.Get(ctx, "s"); err != nil || got != set {
			t.Fatalf("Get after Set(%+v) = %+v, %v", set, got, err)
		}
	})
}

// FuzzScriptMatchesModel turns the fuzzer's bytes into a timeline of
// admissions (batches of new and repeated IDs), releases and clock steps,
// runs it through admit.lua on miniredis with an exact clock, and checks
// every reply and the stored log against slotModel, like
// TestScriptMatchesModel does with random timelines.
//
// Each byte is one operation, by its top two bits: 0 steps the clock by
// (low 6 bits) sixteenths of a window; 1 releases an issued ID; 2 and 3
// admit a batch of 1 to 4 IDs, where bit i+2 makes the i-th a repeat of an
// issued ID chosen by the next byte. A 3 first takes a byte b of its own:
// the batch's not-before time, now + (b - 64) sixteenths of a window (from
// four windows past to twelve ahead).
func FuzzScriptMatchesModel(f *testing.F) {
	mr := miniredis.RunT(f)
	mr.ClockTTL(true) // expiry follows SetTime, as in Redis: admit.lua reads it back
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdb.AddHook(lua.FlagFallback()) // miniredis does not know script flags
	f.Cleanup(func() { rdb.Close() })
	script := lua.Admit()

	f.Add(uint8(2), uint16(1000), uint16(500), uint8(0), []byte{0x80, 0x80, 0x80, 0x10, 0x83, 0x40, 0xbf, 0x00, 0x01})
	f.Add(uint8(0), uint16(1), uint16(0), uint8(1), []byte{0xc3, 0xff, 0x3f, 0xc0, 0x41})
	f.Add(uint8(5), uint16(3000), uint16(9000), uint8(3), []byte{0x83, 0x83, 0x83, 0x83, 0x08, 0x83, 0x50, 0x45, 0x83})
	f.Add(uint8(1), uint16(60000), uint16(65535), uint8(2), bytes.Repeat([]byte{0x81, 0x04}, 32))
	// Not-before times: ahead of a full log, far ahead, past, then plain.
	f.Add(uint8(0), uint16(1000), uint16(2000), uint8(0), []byte{0x81, 0xc0, 0x50, 0xc1, 0xff, 0x80, 0xc0, 0x00, 0x83, 0x3f, 0xc2, 0x48})
	f.Fuzz(func(t *testing.T, limit uint8, windowMs, maxDelayMs uint16, granSel uint8, ops []byte) {
		ctx := context.Background()
		q := Quota{
			Limit:    1 + int(limit%8),
			Window:   time.Duration(1+windowMs%5000) * time.Millisecond,
			MaxDelay: time.Duration(maxDelayMs%15000) * time.Millisecond,
		}
		gran := []int64{1, 1, 1000, 1_000_000}[granSel%4]
		const key = "fuzz:{model}:log"
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(granSel) * 7919 * time.Microsecond)
		m := &slotModel{log: map[string]int64{}}
		var issued []string
		if len(ops) > maxFuzzOps {
			ops = ops[:maxFuzzOps] // each op costs a round trip or two; keep execs quick
		}
		for step := 0; step < len(ops); step++ {
			op := ops[step]
			desc := fmt.Sprintf("step %d (op %#02x) quota %v gran %dµs", step, op, q, gran)
			switch op >> 6 {
			case 0:
				now = now.Add(time.Duration(op&63) * q.Window / 16)
				continue
			case 1:
				if len(issued) == 0 {
					continue
				}
				id := issued[int(op&63)%len(issued)]
				delete(m.log, id)
				if err := rdb.ZRem(ctx, key, id).Err(); err != nil {
					t.Fatal(err)
				}
			default:
				var nb int64
				if op>>6 == 3 && step+1 < len(ops) {
					step++
					nb = now.Add(time.Duration(int(ops[step])-64) * q.Window / 16).UnixMicro()
				}
				ids := make([]string, 1+op&3)
				for i := range ids {
					if op&(4<<i) != 0 && len(issued) > 0 && step+1 < len(ops) {
						step++
						ids[i] = issued[int(ops[step])%len(issued)]
					} else {
						ids[i] = "id" + strconv.Itoa(len(issued))
						issued = append(issued, ids[i])
					}
				}
				ids = slices.Compact(ids)
				mr.SetTime(now)
				res, err := script.Run(ctx, rdb, []string{key}, appendAdmitArgsAt(nil, q, gran, nb, ids)...).Int64Slice()
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				if len(res) == 0 || res[0] != now.UnixMicro() {
					t.Fatalf("%s: script reply %v, want the clock %d first", desc, res, now.UnixMicro())
				}
				want := m.admitAt(now.UnixMicro(), nb, q, gran, ids)
				if diff := cmp.Diff(want, scriptResults(res, len(ids), len(want))); diff != "" {
					t.Fatalf("%s: admit %v not before %d (-model,+script):\n%s", desc, ids, nb, diff)
				}
			}
			checkLog(t, desc, rdb, key, m, now.UnixMicro()-q.Window.Microseconds())
		}
	})
}

// maxFuzzOps bounds the timeline of one FuzzScriptMatchesModel input.
const maxFuzzOps = 64

// scriptResults reads admit.lua's reply for n IDs as modelResults, and
// whatever follows them (the retry hint) as modelResult{Code: v}, up to
// want results in all, as slotModel.admit returns them.
func scriptResults(res []int64, n, want int) []modelResult {
	var got []modelResult
	for i := 0; i < n && 3+3*i < len(res); i++ {
		got = append(got, modelResult{res[1+3*i], res[2+3*i], res[3+3*i]})
	}
	for i := 1 + 3*n; i < len(res) && len(got) < want; i++ {
		got = append(got, modelResult{Code: res[i]})
	}
	return got
}

// checkLog fails t unless the stored log holds exactly the model's entries
// with slots after cut (µs): what is live, since both trim only when they
// decide.
func checkLog(t *testing.T, desc string, rdb *redis.Client, key string, m *slotModel, cut int64) {
	t.Helper()
	stored, err := rdb.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, z := range stored {
		if s := int64(z.Score); s > cut {
			got[z.Member.(string)] = s
		}
	}
	want := map[string]int64{}
	for id, s := range m.log {
		if s > cut {
			want[id] = s
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: log (-model,+redis):\n%s", desc, diff)
	}
}
