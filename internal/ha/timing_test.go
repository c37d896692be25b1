package ha

import (
	"testing"
	"time"
)

func TestDefaultTimingIsValid(t *testing.T) {
	for _, ttl := range []time.Duration{10 * time.Second, 15 * time.Second, 30 * time.Second, time.Hour} {
		tm := TimingFor(ttl)
		if err := tm.Validate(); err != nil {
			t.Errorf("TimingFor(%s): %v", ttl, err)
		}
	}
	tm := TimingFor(15 * time.Second)
	want := Timing{SessionTTL: 15 * time.Second, Heartbeat: 5 * time.Second, StepDown: 7500 * time.Millisecond,
		Takeover: 15 * time.Second, CallTimeout: 2500 * time.Millisecond, Retry: time.Second, Kill: 3750 * time.Millisecond}
	if tm != want {
		t.Fatalf("TimingFor(15s) = %+v, want %+v", tm, want)
	}
	if TimingFor(0) != want {
		t.Fatal("TimingFor(0) is not the default")
	}
	bad := []Timing{
		{SessionTTL: 5 * time.Second, Heartbeat: time.Second, StepDown: 2 * time.Second, Takeover: 3 * time.Second, CallTimeout: time.Second, Retry: time.Second},
		{SessionTTL: 10 * time.Second, Heartbeat: 3 * time.Second, StepDown: 4 * time.Second, Takeover: 8 * time.Second, CallTimeout: 2 * time.Second, Retry: time.Second},
		{SessionTTL: 10 * time.Second, Heartbeat: time.Second, StepDown: 5 * time.Second, Takeover: 5 * time.Second, CallTimeout: time.Second, Retry: time.Second},
		{SessionTTL: 10 * time.Second, Heartbeat: time.Second, StepDown: 10 * time.Second, Takeover: 20 * time.Second, CallTimeout: time.Second, Retry: time.Second},
		// Terraform would still be running when another instance may take over.
		{SessionTTL: 10 * time.Second, Heartbeat: time.Second, StepDown: 5 * time.Second, Takeover: 10 * time.Second, CallTimeout: time.Second, Retry: time.Second, Kill: 5 * time.Second},
		{SessionTTL: 10 * time.Second, Heartbeat: time.Second, StepDown: 5 * time.Second, Takeover: 10 * time.Second, CallTimeout: time.Second, Retry: time.Second},
	}
	for i, b := range bad {
		if b.Validate() == nil {
			t.Errorf("bad timing %d accepted: %+v", i, b)
		}
	}
}

func held(session string, index uint64, id string) view {
	return view{known: true, exists: true, session: session, index: index, rec: record{ID: id}}
}

// The follower rules, with a fake clock.
func TestTrackerRules(t *testing.T) {
	const T = 15 * time.Second
	t0 := time.Unix(1000, 0)
	mine := func(s string) bool { return s == "me" }
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	check := func(tr *tracker, v view, now time.Time, wantAct action, wantAt time.Time) {
		t.Helper()
		act, when := tr.decide(v, mine, now)
		if act != wantAct || !when.Equal(wantAt) {
			t.Fatalf("decide at +%s: got %s at +%s, want %s at +%s", now.Sub(t0), act, when.Sub(t0), wantAct, wantAt.Sub(t0))
		}
	}

	// Nothing known: nothing to do.
	tr := &tracker{takeover: T}
	check(tr, view{}, t0, actNone, time.Time{})

	// Cold start: a free key is acquired at once.
	free := view{known: true}
	tr.observe(t0, free, mine)
	check(tr, free, t0, actAcquire, t0)

	// Another instance leads and beats: takeover T after the last change
	// seen, never earlier.
	tr.observe(at(1*time.Second), held("a", 10, "a"), mine)
	check(tr, held("a", 10, "a"), at(2*time.Second), actTakeover, at(16*time.Second))
	tr.observe(at(6*time.Second), held("a", 11, "a"), mine) // heartbeat
	tr.observe(at(9*time.Second), held("a", 11, "a"), mine) // a blocking query that timed out: no change
	check(tr, held("a", 11, "a"), at(9*time.Second), actTakeover, at(21*time.Second))
	// A change not observed yet waits a full period from now.
	check(tr, held("a", 12, "a"), at(10*time.Second), actTakeover, at(25*time.Second))

	// The leader vanished (session expired, key deleted): acquire once the
	// last sign of it is T old.
	tr.observe(at(12*time.Second), free, mine)
	check(tr, free, at(12*time.Second), actAcquire, at(21*time.Second))

	// Released on purpose: at once.
	released := view{known: true, exists: true, rec: record{ID: "a", Released: true}}
	check(tr, released, at(12*time.Second), actAcquire, at(12*time.Second))

	// Blind while following (Consul errors, or its index went back): the
	// other may have beaten meanwhile.
	tr.blind(at(30*time.Second), false)
	check(tr, free, at(31*time.Second), actAcquire, at(45*time.Second))
	// Blind while leading changes nothing.
	tr.blind(at(40*time.Second), true)
	check(tr, free, at(41*time.Second), actAcquire, at(45*time.Second))

	// Our own session still holds the key (lead lost on a timeout): resume.
	check(tr, held("me", 20, "me"), at(41*time.Second), actResume, at(41*time.Second))
	// Observing our own key does not count as another leader.
	tr2 := &tracker{takeover: T}
	tr2.observe(t0, held("me", 5, "me"), mine)
	check(tr2, free, t0, actAcquire, t0)
}

// The safety argument in numbers: for every heartbeat schedule a leader may
// have, the earliest takeover comes at least T-S after the leader's own
// step-down deadline.
func TestTakeoverComesAfterStepDown(t *testing.T) {
	tm := TimingFor(15 * time.Second)
	t0 := time.Unix(1000, 0)
	mine := func(string) bool { return false }
	for _, lat := range []time.Duration{0, time.Millisecond, 400 * time.Millisecond, tm.CallTimeout} {
		for _, seen := range []time.Duration{0, 10 * time.Millisecond, time.Second} {
			tr := &tracker{takeover: tm.Takeover}
			sent := t0                      // the leader sent its last successful heartbeat
			committed := sent.Add(lat)      // Consul applied it
			observed := committed.Add(seen) // the follower saw it
			tr.observe(observed, held("a", 7, "a"), mine)
			_, takeover := tr.decide(held("a", 7, "a"), mine, observed)
			stepDown := sent.Add(tm.StepDown)
			if gap := takeover.Sub(stepDown); gap < tm.Takeover-tm.StepDown {
				t.Fatalf("latency %s, seen after %s: takeover only %s after the step-down", lat, seen, gap)
			}
		}
	}
}
