package storm

import (
	"bytes"
	"errors"
	"image/png"
	"reflect"
	"testing"
	"time"

	"gonum.org/v1/plot/vg"
)

// slotSteps draws every count of a scenario, in steps that cover it as it
// ran: the last slot alone if it is at least half a slot wide, joined to
// the one before otherwise, and counts past the end in the last step.
func TestSlotStepsCoverTheScenario(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name         string
		began, ended time.Duration
		counts       []int64
		want         []step
	}{
		{"whole slots", 1000 * ms, 1750 * ms, []int64{1, 2, 3, 0, 0},
			[]step{{0, 1000 * ms, 1250 * ms, 1}, {0, 1250 * ms, 1500 * ms, 2}, {0, 1500 * ms, 1750 * ms, 3}}},
		{"a few ms late: the last slot is wider", 1000 * ms, 1753 * ms, []int64{1, 2, 3, 4, 0},
			[]step{{0, 1000 * ms, 1250 * ms, 1}, {0, 1250 * ms, 1500 * ms, 2}, {0, 1500 * ms, 1753 * ms, 7}}},
		{"half a slot more: a narrow last slot", 1000 * ms, 1875 * ms, []int64{1, 2, 3, 4, 0},
			[]step{{0, 1000 * ms, 1250 * ms, 1}, {0, 1250 * ms, 1500 * ms, 2}, {0, 1500 * ms, 1750 * ms, 3}, {0, 1750 * ms, 1875 * ms, 4}}},
		{"past the slots: the last takes the rest", 0, 2 * time.Second, []int64{1, 2},
			[]step{{0, 0, 250 * ms, 1}, {0, 250 * ms, 2 * time.Second, 2}}},
		{"shorter than a slot", 0, 100 * ms, []int64{5, 1},
			[]step{{0, 0, 100 * ms, 6}}},
		{"no slots", 0, time.Second, nil, nil},
	} {
		r := &Report{Slot: 250 * ms, Scenarios: []Scenario{{Began: tc.began, Ended: tc.ended}}}
		if got := slotSteps(r, 0, tc.counts); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

// slotReport is a report of two lookup scenarios and the client path,
// whose counts per slot add up to its rows.
func slotReport() *Report {
	r := &Report{Slot: 250 * time.Millisecond, Scenarios: make([]Scenario, len(script))}
	for p := range r.Scenarios {
		r.Scenarios[p] = Scenario{Title: script[p].title, Began: time.Duration(p) * time.Second, Ended: time.Duration(p+1) * time.Second}
	}
	r.Scenarios[ColdStart].Rows = []Row{
		{Key: Key{Client: NoCache}, RegistryCalls: 10, Failed: 0, CallsPerSlot: []int64{4, 3, 2, 1, 0}, FailedPerSlot: make([]int64, 5)},
		{Key: Key{Client: RegCache}, RegistryCalls: 3, Failed: 1, CallsPerSlot: []int64{3, 0, 0, 0, 0}, FailedPerSlot: []int64{0, 0, 0, 1, 0}},
	}
	r.Scenarios[Outage].Rows = []Row{
		{Key: Key{Client: RegCache, Cold: true}, RegistryCalls: 2, Failed: 7, CallsPerSlot: []int64{1, 0, 0, 1, 0}, FailedPerSlot: []int64{2, 2, 2, 1, 0}},
	}
	r.Scenarios[ClientPath].Origin = 250 * time.Millisecond
	r.Scenarios[ClientPath].RPC = []RPCRow{
		{Client: GoMicroSelector, Failed: 2, DeadAttempts: 9, FailedPerSlot: []int64{0, 1, 1, 0, 0}, DeadPerSlot: []int64{0, 3, 3, 3, 0}},
	}
	return r
}

// CheckPicture passes a report whose slots add up to its rows, and catches
// a count that the picture would draw in the wrong amount, or not at all.
func TestCheckPictureComparesWithTheTables(t *testing.T) {
	if err := CheckPicture(slotReport()); err != nil {
		t.Fatalf("consistent report: %v", err)
	}
	for name, spoil := range map[string]func(*Report){
		"a registry call missing from the slots": func(r *Report) { r.Scenarios[ColdStart].Rows[0].CallsPerSlot[0]-- },
		"a failed lookup too many":               func(r *Report) { r.Scenarios[Outage].Rows[0].FailedPerSlot[4]++ },
		"a row without slots":                    func(r *Report) { r.Scenarios[ColdStart].Rows[1].FailedPerSlot = nil },
		"an attempt to the dead node missing":    func(r *Report) { r.Scenarios[ClientPath].RPC[0].DeadPerSlot[1]-- },
		"a failed RPC too many":                  func(r *Report) { r.Scenarios[ClientPath].RPC[0].FailedPerSlot[0]++ },
	} {
		r := slotReport()
		spoil(r)
		if err := CheckPicture(r); !errors.Is(err, ErrPicture) {
			t.Errorf("%s: CheckPicture says %v, want ErrPicture", name, err)
		}
	}
}

// The picture of a report is a PNG of the picture's width.
func TestWritePictureDecodes(t *testing.T) {
	var b bytes.Buffer
	if err := WritePicture(&b, slotReport()); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := img.Bounds().Dx(), int(pictureWidth*pictureDPI/vg.Inch); got != want {
		t.Errorf("width %d px, want %d", got, want)
	}
	if err := WritePicture(&b, &Report{Slot: time.Second}); err == nil {
		t.Error("a report without scenarios has a picture")
	}
}
