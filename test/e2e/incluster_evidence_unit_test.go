package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The node's files keep every record, also of containers and Pods long gone; what cannot be read
// is an error of the collection, never an empty record.
func TestNodeFilesCollectEveryRecordAndRefuseWhatTheyCannotRead(t *testing.T) {
	const (
		x  = `{"identity":"w-0#x","started":"2030-01-01T00:00:00Z"}` + "\n" + `{"identity":"w-0#x","epoch":3,"from":"2030-01-01T00:00:01Z","until":"2030-01-01T00:00:13Z"}` + "\n"
		x2 = `{"identity":"w-0#y","started":"2030-01-01T00:00:14Z"}` + "\n" + `{"identity":"w-0#y","epoch":4,"from":"2030-01-01T00:00:27Z","until":"2030-01-01T00:00:39Z"}` + "\n" + `{"identity":"w-0#y","epoch":4,"from":"2030-01-01T00:00:27Z","until":"2030-01-01T00:00:30Z"}` + "\n"
	)
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string
		wantIvs int
	}{
		{name: "one Pod's successive containers, and another Pod", files: map[string]string{"w-0.jsonl": x + x2, "w-1.jsonl": x2}, wantIvs: 2},
		{name: "a line still being written", files: map[string]string{"w-0.jsonl": x + `{"identity":"w-0#y","sta`}, wantErr: "still being written"},
		{name: "a line that is not a record", files: map[string]string{"w-0.jsonl": x + "{\"msg\":\"acquired the lease\",\"identity\":\"w-0#x\"}\n"}, wantErr: "not a record line"},
		{name: "garbage", files: map[string]string{"w-0.jsonl": "not json\n"}, wantErr: "bad line"},
		{name: "no record at all", files: map[string]string{}, wantErr: "holds no record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, err := newNodeFiles(filepath.Join(dir), "/on/node")
			if err != nil {
				t.Fatal(err)
			}
			recs, err := n.collect()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ivs := recs.intervals()
			if len(ivs) != tc.wantIvs || !recs.started["w-0#x"] || !recs.started["w-0#y"] {
				t.Fatalf("intervals %v, started %v", ivs, recs.started)
			}
			// The last line per holding is its interval: y's release cut it to :30.
			if last := ivs[len(ivs)-1]; last.Epoch != 4 || !last.Until.Equal(time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)) {
				t.Fatalf("y's holding %+v, want epoch 4 until :30", last)
			}
		})
	}
}

// The writer Pod template keeps its record in the hostPath folder, named after the Pod, which
// the harness made (type Directory: never one the kubelet creates in its stead).
func TestNodeFilesWriterSpec(t *testing.T) {
	n, err := newNodeFiles(t.TempDir(), "/node/ns-1")
	if err != nil {
		t.Fatal(err)
	}
	sts := referenceWriter("ns-1", writerSA, 1, nil)
	spec := &sts.Spec.Template.Spec
	n.writerSpec(spec)
	v := spec.Volumes[len(spec.Volumes)-1]
	if v.HostPath == nil || v.HostPath.Path != "/node/ns-1" || v.HostPath.Type == nil || *v.HostPath.Type != "Directory" {
		t.Fatalf("volume %+v", v)
	}
	c := spec.Containers[0]
	if got := strings.Join(c.Args, " "); got != "--intervals-file=/ehdb-evidence/$(POD_NAME).jsonl" {
		t.Fatalf("args %q", got)
	}
	hasPodName := false
	for _, e := range c.Env {
		hasPodName = hasPodName || (e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !hasPodName {
		t.Fatal("the container has no POD_NAME from metadata.name: $(POD_NAME) would not expand")
	}
	if m := c.VolumeMounts[len(c.VolumeMounts)-1]; m.Name != v.Name || m.MountPath != "/ehdb-evidence" || m.ReadOnly {
		t.Fatalf("mount %+v", m)
	}
}

// The judge over collected records: the Pod-deletion flake's history (the holder of epoch 3 has
// no record) is a harness error naming that process, and the rest is still judged.
func TestJudgeEvidence(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	recs := newRecords()
	for i, id := range []string{"a", "b", "d"} {
		recs.started[id] = true
		epoch := uint64(i + 1)
		if id == "d" {
			epoch = 4
		}
		recs.last[id+"/"+strconv.FormatUint(epoch, 10)] = interval{Identity: id, Epoch: epoch, From: at(10 * int(epoch)), Until: at(10*int(epoch) + 5)}
	}
	samples := []scrapeSample{
		{Identity: "b", Epoch: 2, Valid: true, Start: at(21), End: at(22)},
		{Identity: "c", Epoch: 3, Valid: true, Start: at(31), End: at(32)}, // c's record was lost
		{Identity: "d", Epoch: 4, Valid: true, Start: at(50), End: at(51)}, // outside d's [40, 45]
	}
	ivs, safety, harness := judgeEvidence(recs, samples)
	if len(ivs) != 3 {
		t.Fatalf("intervals %v", ivs)
	}
	if len(harness) != 1 || !strings.Contains(harness[0], "HARNESS: no record of c was collected") {
		t.Fatalf("harness verdicts %q", harness)
	}
	if len(safety) != 1 || !strings.Contains(safety[0], "d's scrape") || !strings.Contains(safety[0], "outside its validity") {
		t.Fatalf("safety verdicts %q", safety)
	}
	if _, _, harness := judgeEvidence(newRecords(), nil); len(harness) != 1 || !strings.Contains(harness[0], "no validity interval") {
		t.Fatalf("nothing collected: harness verdicts %q", harness)
	}
}
