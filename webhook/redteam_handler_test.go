package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// panicky panics on every lookup.
type panicky struct{}

func (panicky) Resolve(context.Context, webhook.Query) *webhook.Facts { panic("resolver bug") }

// blocking holds every lookup until released (or the lookup's deadline).
type blocking struct {
	release chan struct{}
	mu      sync.Mutex
	entered int
}

func (b *blocking) Resolve(ctx context.Context, q webhook.Query) *webhook.Facts {
	b.mu.Lock()
	b.entered++
	b.mu.Unlock()
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return webhook.NewFacts(time.Time{})
}

func (b *blocking) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entered
}

func TestHandlerRecoversPanics(t *testing.T) {
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: panicky{}, Policy: webhook.Policy{RequireLiveLease: true}}))
	t.Cleanup(srv.Close)

	code, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil))
	if code != 200 || out.Response == nil || out.Response.Allowed || out.Response.Result.Code != 500 || !strings.Contains(out.Response.Result.Message, "internal error") {
		t.Fatalf("a workload whose judging panics: %d %s; want a refusal with code 500", code, raw)
	}
	p := pod(sts(compliant()...), "noetl-cmdbus-writer-0")
	code, out, raw = post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, p, nil))
	if code != 200 || out.Response == nil || !out.Response.Allowed || len(out.Response.Warnings) != 1 || !strings.Contains(out.Response.Warnings[0], "fail open") {
		t.Fatalf("a Pod whose judging panics: %d %s; want admitted with a warning", code, raw)
	}
}

// TestHandlerBoundsReviewsInFlight: with every lookup stuck, no more than MaxInFlight reviews are
// worked on — of workloads, which fail closed, a quarter fewer (TestHeavyReviewsLeavePodsTheirSlots);
// the rest are answered 429 by their deadline instead of piling up.
func TestHandlerBoundsReviewsInFlight(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: b, Policy: webhook.Policy{RequireLiveLease: true}, MaxInFlight: 4, LookupTimeout: 2 * time.Second}))
	t.Cleanup(srv.Close)
	body := wt.Review(t, admissionv1.Create, stsKind, sts(compliant()...), nil)
	var sent atomic.Int32
	send := func(timeout string) int {
		// Each from a requester of its own: one requester holds at most an eighth (slots.go).
		b := asUser(t, body, fmt.Sprintf("user-%d", sent.Add(1)))
		resp, err := http.Post(srv.URL+"?timeout="+timeout, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var holders sync.WaitGroup
	for range 4 {
		holders.Add(1)
		go func() { defer holders.Done(); send("10s") }()
	}
	for deadline := time.Now().Add(5 * time.Second); b.count() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = send("200ms") }()
	}
	wg.Wait()
	entered := b.count()
	close(b.release)
	holders.Wait()
	for _, c := range codes {
		if c != http.StatusTooManyRequests {
			t.Fatalf("with 3 reviews stuck in lookups, more arrived: codes %v (lookups entered %d); want every one answered 429", codes, entered)
		}
	}
	if entered != 3 {
		t.Fatalf("lookups entered %d, want 3 (MaxInFlight less the Pods' reserve)", entered)
	}
}

// fakeReaders is a ConfigMapReaders over an indexer, as the webhook's informers fill it.
func fakeReaders(t testing.TB, objs ...any) webhook.IndexReaders {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{webhook.ConfigMapIndex: webhook.IndexByConfigMap, webhook.ServiceAccountIndex: webhook.IndexByServiceAccount})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return webhook.IndexReaders{idx}
}

func TestHandlerJudgesConfigMapsByTheirReaders(t *testing.T) {
	reader := sts(append(compliant(), envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)))...)
	other := sts(compliant()...)
	other.Name = "unrelated"
	cluster := goodCluster()
	clear(cluster.Leases)
	h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, reader, other)}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
			Data: map[string]string{"fencing": v}}
	}
	send := func(op admissionv1.Operation, obj, old *corev1.ConfigMap) *admissionv1.AdmissionResponse {
		t.Helper()
		body := wt.Review(t, op, cmKind, obj, nil)
		if old != nil {
			body = wt.Review(t, op, cmKind, obj, old)
		}
		body = []byte(strings.Replace(string(body), `"name":"`+wt.WriterName+`"`, `"name":"flags"`, 1))
		_, out, raw := post(t, srv.URL, "application/json", body)
		if out.Response == nil {
			t.Fatalf("no response: %s", raw)
		}
		return out.Response
	}
	if r := send(admissionv1.Update, cm("enforce"), cm("shadow")); r.Allowed || !strings.Contains(r.Result.Message, "through ConfigMap noetl/flags") ||
		!strings.Contains(r.Result.Message, "ehdb-shard-00000000 (shard 0) does not exist") {
		t.Fatalf("shadow -> enforce with no Lease: %+v", r)
	}
	if r := send(admissionv1.Create, cm("enforce"), nil); r.Allowed {
		t.Fatalf("created with enforce, no Lease: admitted")
	}
	if r := send(admissionv1.Update, cm("shadow"), cm("enforce")); !r.Allowed {
		t.Fatalf("disarming refused: %+v", r.Result)
	}
	cluster.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now.Add(-time.Second), 1).Spec
	h.Clock = nil
	cluster.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, time.Now(), 1).Spec
	if r := send(admissionv1.Update, cm("enforce"), cm("shadow")); !r.Allowed {
		t.Fatalf("shadow -> enforce with the Lease live: %+v", r.Result)
	}
	_ = appsv1.StatefulSet{}
}

// TestHandlerChargesBodiesAsTheyArrive: a Content-Length is a claim, not a charge. Eight uploads
// that claim 7 MiB and send nothing (once, 3 × 7 MiB took the whole body budget) hold nothing:
// each is hung up on (408) once it stops sending, and an ordinary review is answered meanwhile.
func TestHandlerChargesBodiesAsTheyArrive(t *testing.T) {
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, MaxInFlight: 32}))
	t.Cleanup(srv.Close)
	const big = 7 << 20
	var writers []*io.PipeWriter
	t.Cleanup(func() {
		for _, w := range writers {
			w.Close()
		}
	})
	codes := make(chan int, 8)
	for range 8 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"?timeout=10s", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = big // announced, never sent: a slow client
		req.Header.Set("Content-Type", "application/json")
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- -1
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	code, out, raw := post(t, srv.URL+"?timeout=10s", "application/json", wt.Review(t, admissionv1.Create, stsKind, sts(), nil))
	if code != 200 || out.Response == nil || !out.Response.Allowed {
		t.Fatalf("an ordinary review beside 8 claimed 7 MiB uploads: %d %s", code, raw)
	}
	for range 8 {
		select {
		case c := <-codes:
			if c != http.StatusRequestTimeout {
				t.Fatalf("an upload that stopped sending: HTTP %d, want 408", c)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an upload that sends nothing was not hung up on")
		}
	}
}

// TestHandlerRefusesAnnouncedOversizeBodies: a Content-Length above the limit is refused unread.
func TestHandlerRefusesAnnouncedOversizeBodies(t *testing.T) {
	srv := httptest.NewServer(webhook.NewHTTPHandler(&webhook.Handler{Resolver: &wt.Resolver{}}))
	t.Cleanup(srv.Close)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, pr)
	req.ContentLength = 64<<20 + 1 // more than the API server ever sends, escapes and all
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
}

// fakeOwners holds controllers by "Kind/ns/name"; unknown lists kinds it cannot tell about.
type fakeOwners struct {
	owners  map[string]runtime.Object
	unknown bool
}

func (f fakeOwners) Owner(ns string, ref metav1.OwnerReference) (*webhook.Workload, bool, bool) {
	if f.unknown {
		return nil, false, false
	}
	o, ok := f.owners[ref.Kind+"/"+ns+"/"+ref.Name]
	if !ok {
		return nil, false, true
	}
	w, err := webhook.WorkloadOf(o, ns)
	if err != nil || types.UID(w.UID) != ref.UID {
		return nil, false, true
	}
	return w, true, true
}

// RevisionTemplate reads a ControllerRevision held as "ControllerRevision/ns/name".
func (f fakeOwners) RevisionTemplate(ns, name string, owner types.UID) (*corev1.PodTemplateSpec, bool, bool) {
	if f.unknown {
		return nil, false, false
	}
	rev, ok := f.owners["ControllerRevision/"+ns+"/"+name].(*appsv1.ControllerRevision)
	if !ok {
		return nil, false, true
	}
	if ref := metav1.GetControllerOf(rev); ref == nil || ref.UID != owner {
		return nil, false, true
	}
	tmpl, err := webhook.StatefulSetRevisionTemplate(rev)
	if err != nil {
		return nil, false, false
	}
	return tmpl, true, true
}

// ownerCase is one review judged by a Handler that fetches owners from a fixed set.
type ownerCase struct {
	name     string
	owners   map[string]runtime.Object
	kind     metav1.GroupVersionKind
	obj, old runtime.Object // old set: an UPDATE, else a CREATE
	allowed  bool
}

// runOwnerCases posts each case to a Handler over cluster and wants it allowed or refused, a
// refusal saying want.
func runOwnerCases(t *testing.T, cluster webhook.Resolver, want string, cases []ownerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Owners: fakeOwners{owners: tc.owners}}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			op := admissionv1.Create
			if tc.old != nil {
				op = admissionv1.Update
			}
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, op, tc.kind, tc.obj, tc.old))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, want) {
				t.Fatalf("want %q in the refusal: %s", want, raw)
			}
		})
	}
}

// TestHandlerVerifiesTheExemptingOwner: a ReplicaSet is exempt from the order check only when its
// controller Deployment exists with that UID and has the same pod template (issue 17, class 2:
// an armed ReplicaSet under a real, unarmed Deployment was admitted as "judged already"); a Job
// likewise under its CronJob. An owner the webhook cannot fetch exempts nothing.
func TestHandlerVerifiesTheExemptingOwner(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	armedTemplate := deployment(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...)).Spec.Template
	armedDeployment := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, UID: "real-uid"}, Spec: appsv1.DeploymentSpec{Template: *armedTemplate.DeepCopy()}}
	unarmedDeployment := armedDeployment.DeepCopy()
	unarmedDeployment.Name = "unarmed"
	unarmedDeployment.Spec.Template = deployment(sts(wt.ServiceAccount(wt.WriterSA))).Spec.Template
	cronTemplate := armedTemplate.DeepCopy()
	cronTemplate.Spec.RestartPolicy = corev1.RestartPolicyNever
	cron := &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "cron-uid"},
		Spec:       batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: *cronTemplate}}}}
	owners := fakeOwners{owners: map[string]runtime.Object{"Deployment/" + ns + "/w": armedDeployment, "Deployment/" + ns + "/unarmed": unarmedDeployment, "CronJob/" + ns + "/c": cron}}
	rsKind := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}
	jobKind := metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	rs := func(owner string, uid types.UID) *appsv1.ReplicaSet {
		tpl := armedTemplate.DeepCopy()
		tpl.Labels["pod-template-hash"] = "5d9c7b8f6" // what the Deployment controller adds
		return &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
			ObjectMeta: metav1.ObjectMeta{Name: owner + "-5d9c7b8f6", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: owner, UID: uid, Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Template: *tpl}}
	}
	cronJob := func(edit func(*corev1.PodTemplateSpec)) *batchv1.Job {
		tpl := cronTemplate.DeepCopy()
		tpl.Labels["batch.kubernetes.io/job-name"], tpl.Labels["job-name"] = "c-29000000", "c-29000000" // the Job's defaulting
		tpl.Labels["batch.kubernetes.io/controller-uid"], tpl.Labels["controller-uid"] = "job-uid", "job-uid"
		if edit != nil {
			edit(tpl)
		}
		return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Name: "c-29000000", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "CronJob", Name: "c", UID: "cron-uid", Controller: ptr.To(true)}}},
			Spec: batchv1.JobSpec{Template: *tpl}}
	}
	const orderChecked = "ehdb-shard-00000000 (shard 0) does not exist"
	cases := []struct {
		name    string
		owners  webhook.Owners
		kind    metav1.GroupVersionKind
		obj     runtime.Object
		allowed bool
		msg     string
	}{
		{"the ReplicaSet of a real Deployment with its template", owners, rsKind, rs("w", "real-uid"), true, ""},
		{"a ReplicaSet naming a Deployment that does not exist", owners, rsKind, rs("w", "forged-uid"), false, orderChecked},
		{"an armed ReplicaSet under a real, unarmed Deployment (its true uid)", owners, rsKind, rs("unarmed", "real-uid"), false, orderChecked},
		{"a ReplicaSet whose owner the webhook cannot fetch", fakeOwners{unknown: true}, rsKind, rs("w", "real-uid"), false, orderChecked},
		{"a ReplicaSet with no owner source at all", nil, rsKind, rs("w", "real-uid"), false, orderChecked},
		{"the Job of a real CronJob with its template", owners, jobKind, cronJob(nil), true, ""},
		{"a Job whose template differs from its CronJob's", owners, jobKind, cronJob(func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Image = "evil:latest"
		}), false, orderChecked},
		// The final red team: the CronJob's template, but Indexed, so each pod has another
		// hostname than the CronJob's Jobs give theirs.
		{"an Indexed Job under a CronJob whose Jobs are not Indexed", owners, jobKind, func() *batchv1.Job {
			j := cronJob(nil)
			j.Spec.CompletionMode, j.Spec.Completions = ptr.To(batchv1.IndexedCompletion), ptr.To[int32](3)
			return j
		}(), false, orderChecked},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Owners: tc.owners}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, tc.kind, tc.obj, nil))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want the order check (%q): %s", tc.msg, raw)
			}
		})
	}
}
