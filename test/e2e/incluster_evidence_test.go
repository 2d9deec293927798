package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The in-cluster safety checker judges what the writer containers recorded: each process's start
// line and its validity intervals (ehdb-writer --intervals-file). Where that record is kept decides
// whether it can be lost, so it is an evidence store of its own.
//
// Where the harness can read the node's files (E2E_NODE_DIR: `make e2e-node`, whose suite runs on
// the node), each writer Pod appends to a file in a hostPath folder: it is written before the
// token it records can be scraped, and outlives the container, its restarts and the Pod. Elsewhere
// (kind) the record is printed among the log lines and the harness follows the logs — which the
// kubelet serves by Pod and container name, for the current container only, and not at all once
// the Pod is gone, so a short-lived container can be missed; the checker then reports a harness
// error for that process, never a safety verdict.

const (
	// nodeDirEnv names a folder on the node(s) that the harness can read: the writer Pods keep
	// their records in <it>/<namespace>. nodeDirOnNodeEnv is the same folder as the nodes see it,
	// when they mount it elsewhere (default: the same path).
	nodeDirEnv       = "E2E_NODE_DIR"
	nodeDirOnNodeEnv = "E2E_NODE_DIR_ON_NODE"

	evidenceVolume = "ehdb-evidence"
	evidenceMount  = "/ehdb-evidence"
)

// evidence keeps and collects the writer containers' records.
type evidence interface {
	// writerSpec makes a writer Pod template record into this store.
	writerSpec(spec *corev1.PodSpec)
	// stop ends any following; what was kept stays collectable.
	stop()
	// collect reads every record kept so far. An error means the records could not be read: a
	// harness failure, not a verdict.
	collect() (records, error)
	String() string
}

// records are the writer processes' records as collected: who recorded its start, and the last
// line per (identity, epoch), which is that holding's interval.
type records struct {
	started map[string]bool
	last    map[string]interval
}

func newRecords() records { return records{started: map[string]bool{}, last: map[string]interval{}} }

// add reads one line of a record. strict (an intervals file) refuses anything that is not a
// record line; otherwise (a log) other lines are skipped.
func (r records) add(line []byte, strict bool) error {
	var l struct {
		Identity string     `json:"identity"`
		Started  *time.Time `json:"started"`
		Epoch    uint64     `json:"epoch"`
		From     time.Time  `json:"from"`
		Until    time.Time  `json:"until"`
		Msg      *string    `json:"msg"`
	}
	err := json.Unmarshal(line, &l)
	switch {
	case !strict && (err != nil || l.Msg != nil || l.Identity == ""):
		return nil // a log line, not a record
	case err != nil:
		return fmt.Errorf("bad line %q: %v", line, err)
	case l.Msg != nil || l.Identity == "":
		return fmt.Errorf("line %q is not a record line", line)
	case l.Started != nil:
		r.started[l.Identity] = true
	default:
		r.last[l.Identity+"/"+strconv.FormatUint(l.Epoch, 10)] = interval{Identity: l.Identity, Epoch: l.Epoch, From: l.From, Until: l.Until}
	}
	return nil
}

// intervals are the holdings that began (until > from), sorted by start.
func (r records) intervals() []interval {
	var ivs []interval
	for _, iv := range r.last {
		if iv.Until.After(iv.From) {
			ivs = append(ivs, iv)
		}
	}
	sortIntervals(ivs)
	return ivs
}

// judgeEvidence runs the safety checker and the scrape cross-check over collected records. harness
// lists what makes the evidence incomplete (a scraped process with no record, no interval at all):
// those are the harness's failures, and nothing is concluded about the processes concerned.
func judgeEvidence(recs records, samples []scrapeSample) (ivs []interval, safety, harness []string) {
	ivs = recs.intervals()
	if len(ivs) == 0 {
		harness = append(harness, fmt.Sprintf("HARNESS: no validity interval was collected (%d processes recorded their start): a checker over nothing proves nothing", len(recs.started)))
	}
	safety = safetyViolations(ivs, nil)
	s, h := scrapeVerdicts(samples, ivs, recs.started)
	return ivs, append(safety, s...), append(harness, h...)
}

// collectAttempts and collectPause bound the retries of a collection that failed or came back
// incomplete.
const (
	collectAttempts = 4
	collectPause    = time.Second
)

// checkEvidence stops the store, collects the records (retrying a failed or incomplete collection) and
// runs the safety checker and the scrape cross-check: a safety violation fails the test as
// "SAFETY", evidence that could not be collected as "HARNESS".
func (s *icSystem) checkEvidence(samples []scrapeSample) {
	t := s.t
	t.Helper()
	s.evidence.stop()
	var (
		recs            records
		err             error
		ivs             []interval
		safety, harness []string
	)
	for attempt := 1; ; attempt++ {
		recs, err = s.evidence.collect()
		if err == nil {
			ivs, safety, harness = judgeEvidence(recs, samples)
			if len(harness) == 0 {
				break
			}
		}
		if attempt == collectAttempts {
			break
		}
		time.Sleep(collectPause)
	}
	if err != nil {
		t.Errorf("HARNESS: the writers' records could not be collected from %s (%d attempts): %v", s.evidence, collectAttempts, err)
		return
	}
	for _, h := range harness {
		t.Error(h)
	}
	reportViolations(t, "intervals and scrapes", safety)
	var epochs []string
	for _, iv := range ivs {
		epochs = append(epochs, strconv.FormatUint(iv.Epoch, 10))
	}
	t.Logf("safety checker: %d validity intervals (epochs %s) of %d writer processes collected from %s; %d scrapes cross-checked",
		len(ivs), strings.Join(epochs, ","), len(recs.started), s.evidence, len(samples))
}

// newEvidence picks the store: the node's files when the harness can read them, else the logs.
func (s *icSystem) newEvidence() (evidence, error) {
	dir := os.Getenv(nodeDirEnv)
	if dir == "" {
		return s.followLogs(), nil
	}
	onNode := os.Getenv(nodeDirOnNodeEnv)
	if onNode == "" {
		onNode = dir
	}
	return newNodeFiles(filepath.Join(dir, s.ns), filepath.Join(onNode, s.ns))
}

// nodeFiles keeps each writer Pod's record in <dir>/<pod name>.jsonl on the node (a hostPath
// folder); the successive containers of one Pod append to the same file, one write(2) per line.
type nodeFiles struct {
	local  string // the folder as the harness reads it
	onNode string // the folder as the kubelet mounts it
}

func newNodeFiles(local, onNode string) (*nodeFiles, error) {
	if err := os.MkdirAll(local, 0o755); err != nil {
		return nil, fmt.Errorf("the writers' evidence folder: %w", err)
	}
	// The writers run as a non-root user the harness does not know in advance.
	if err := os.Chmod(local, 0o777); err != nil {
		return nil, fmt.Errorf("the writers' evidence folder: %w", err)
	}
	return &nodeFiles{local: local, onNode: onNode}, nil
}

func (n *nodeFiles) String() string { return "the node's files in " + n.local }

func (n *nodeFiles) writerSpec(spec *corev1.PodSpec) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: evidenceVolume, VolumeSource: corev1.VolumeSource{
		// Directory, not DirectoryOrCreate: a folder the harness did not make is one it cannot read.
		HostPath: &corev1.HostPathVolumeSource{Path: n.onNode, Type: ptr.To(corev1.HostPathDirectory)},
	}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: evidenceVolume, MountPath: evidenceMount})
	// $(POD_NAME) is expanded by the kubelet from the container's environment.
	c.Args = []string{"--intervals-file=" + evidenceMount + "/$(POD_NAME).jsonl"}
}

func (n *nodeFiles) stop() {}

func (n *nodeFiles) collect() (records, error) {
	recs := newRecords()
	entries, err := os.ReadDir(n.local)
	if err != nil {
		return recs, err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		path := filepath.Join(n.local, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			errs = append(errs, fmt.Errorf("%s ends in a line still being written (or torn)", path))
			continue
		}
		for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if err := recs.add(line, true); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				break
			}
		}
	}
	if len(entries) == 0 {
		errs = append(errs, fmt.Errorf("%s holds no record: no writer Pod wrote there", n.local))
	}
	return recs, errors.Join(errs...)
}
