package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"

	"github.com/noetl/ehdb-election/election"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// fuzzInputBudget is each fuzz input's time budget: the deadline its review's lookups get, as the
// API server's webhook timeout bounds a real review's. The guard's own work budget (Budget,
// MaxShards) keeps any one input far below it.
const fuzzInputBudget = 100 * time.Millisecond

// The alphabet env programs are written in.
var (
	fzNames    = []string{"NOETL_EHDB_FENCING", "NOETL_EHDB_ELECTION", "MODE", "NOETL_EHDB_ELECTION_SHARD", "FENCING", "ELECTION"}
	fzValues   = []string{"enforce", " EnForce\t", "off", "$(MODE)", "$$(MODE)", "true", "1", "yes", "", "$(NOETL_EHDB_FENCING)", "en$(MODE)", "force", "0", "$(FENCING)"}
	fzPrefixes = []string{"", "NOETL_EHDB_", "X_", "NOETL_"}
	fzCMs      = []string{"cm0", "cm1", "missing"}
	fzSecrets  = []string{"s0", "s1", "gone"}
)

// program turns fuzz bytes into a container's env/envFrom, the ConfigMaps the guard can read and
// the Secrets only the kubelet can.
func program(data []byte) (c corev1.Container, cms, secrets map[string]map[string]string) {
	pick := func(i *int, n int) int {
		if *i >= len(data) {
			return 0
		}
		v := int(data[*i]) % n
		*i++
		return v
	}
	cms = map[string]map[string]string{"cm0": {}, "cm1": {}}
	secrets = map[string]map[string]string{"s0": {}, "s1": {}}
	i := 0
	// Contents first: a few keys per ConfigMap and Secret.
	for _, m := range []map[string]string{cms["cm0"], cms["cm1"], secrets["s0"], secrets["s1"]} {
		for n := pick(&i, 3); n > 0; n-- {
			m[fzNames[pick(&i, len(fzNames))]] = fzValues[pick(&i, len(fzValues))]
		}
	}
	c.Name = "noetl-worker"
	for i < len(data) {
		switch pick(&i, 7) {
		case 0:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[pick(&i, len(fzNames))], Value: fzValues[pick(&i, len(fzValues))]})
		case 1:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[pick(&i, len(fzNames))], ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzCMs[pick(&i, len(fzCMs))]}, Key: fzNames[pick(&i, len(fzNames))], Optional: ptr.To(pick(&i, 2) == 1)}}})
		case 2:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[pick(&i, len(fzNames))], ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzSecrets[pick(&i, len(fzSecrets))]}, Key: fzNames[pick(&i, len(fzNames))], Optional: ptr.To(pick(&i, 2) == 1)}}})
		case 3:
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: fzPrefixes[pick(&i, len(fzPrefixes))], ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzCMs[pick(&i, len(fzCMs))]}, Optional: ptr.To(pick(&i, 2) == 1)}})
		case 4:
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: fzPrefixes[pick(&i, len(fzPrefixes))], SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzSecrets[pick(&i, len(fzSecrets))]}, Optional: ptr.To(pick(&i, 2) == 1)}})
		case 5:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[pick(&i, len(fzNames))], ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
		case 6:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[pick(&i, len(fzNames))]})
		}
	}
	return c, cms, secrets
}

// kubeletEnv is the kubelet's makeEnvironmentVariables (v1.37) for the sources the programs use,
// with concrete ConfigMaps and Secrets. started is false where the kubelet refuses to start the
// container.
func kubeletEnv(c *corev1.Container, namespace string, cms, secrets map[string]map[string]string) (env map[string]string, started bool) {
	tmp := map[string]string{}
	for _, from := range c.EnvFrom {
		var data map[string]string
		var ok, optional bool
		switch {
		case from.ConfigMapRef != nil:
			data, ok = cms[from.ConfigMapRef.Name]
			optional = from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
		case from.SecretRef != nil:
			data, ok = secrets[from.SecretRef.Name]
			optional = from.SecretRef.Optional != nil && *from.SecretRef.Optional
		}
		if !ok {
			if optional {
				continue
			}
			return nil, false
		}
		for k, v := range data {
			tmp[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		val := e.Value
		if val != "" {
			val = modelExpand(val, tmp)
		} else if e.ValueFrom != nil {
			var data map[string]string
			var ok, optional bool
			var key string
			switch {
			case e.ValueFrom.FieldRef != nil:
				tmp[e.Name] = namespace
				continue
			case e.ValueFrom.ConfigMapKeyRef != nil:
				data, ok = cms[e.ValueFrom.ConfigMapKeyRef.Name]
				key = e.ValueFrom.ConfigMapKeyRef.Key
				optional = e.ValueFrom.ConfigMapKeyRef.Optional != nil && *e.ValueFrom.ConfigMapKeyRef.Optional
			case e.ValueFrom.SecretKeyRef != nil:
				data, ok = secrets[e.ValueFrom.SecretKeyRef.Name]
				key = e.ValueFrom.SecretKeyRef.Key
				optional = e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional
			}
			if !ok {
				if optional {
					continue
				}
				return nil, false
			}
			v, found := data[key]
			if !found {
				if optional {
					continue
				}
				return nil, false
			}
			val = v
		}
		tmp[e.Name] = val
	}
	return tmp, true
}

// modelExpand is the fuzzer's model of the kubelet's $(VAR) expansion, written from the rules
// (see expand) independently of the guard's code — byte by byte rather than by searching — so that
// the two agreeing means something. lookup answers only the variables defined so far.
func modelExpand(s string, lookup map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '(':
			j := i + 2
			for j < len(s) && s[j] != ')' {
				j++
			}
			if j == len(s) {
				b.WriteString("$(")
				i += 2
				continue
			}
			if v, ok := lookup[s[i+2:j]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : j+1])
			}
			i = j + 1
		default:
			r, n := utf8.DecodeRuneInString(s[i+1:])
			b.WriteByte('$')
			b.WriteRune(r)
			i += 1 + n
		}
	}
	return b.String()
}

// FuzzEnvResolution checks the guard against the kubelet model over random env programs, in a
// cluster where everything but the program is in order:
//   - a container that will run with enforce and without an enabled election is never allowed;
//   - a container that will run with enforce is never judged unarmed;
//   - where the guard can see every source, it resolves the fencing value exactly as the kubelet.
func FuzzEnvResolution(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 0, 0, 0, 1, 5},             // FENCING=enforce, ELECTION=true
		{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5}, // cm0 has FENCING=enforce, envFrom cm0, ELECTION=true
		{0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 2, 3, 0}, // Secret s0 has FENCING, envFrom s0
		{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 0}, // ELECTION=enforce.. then FENCING=$(MODE)
		{1, 4, 0, 0, 0, 0, 3, 1, 0, 0, 0, 1, 0, 0, 0, 1, 5},
		{0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 9}, // FENCING=$(NOETL_EHDB_FENCING) chains
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64 {
			return
		}
		c, cms, secrets := program(data)
		cluster := goodCluster()
		cluster.ConfigMaps = cms

		s := sts(wt.ServiceAccount(wt.WriterSA), func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers = []corev1.Container{c} })
		in := webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkSTS, s)}
		ctx, cancel := context.WithTimeout(context.Background(), fuzzInputBudget)
		defer cancel()
		d, _ := webhook.Evaluate(ctx, cluster, in, webhook.Policy{RequireLiveLease: true}, now)

		// The guard reads only the ConfigMap keys the workload can make matter; with only those
		// it must decide exactly as with everything.
		filtered := goodCluster()
		filtered.ConfigMaps = webhook.FilterConfigMaps(cms, in.Object)
		if df, _ := webhook.Evaluate(ctx, filtered, in, webhook.Policy{RequireLiveLease: true}, now); df.Allowed != d.Allowed || df.Reason != d.Reason || df.Message() != d.Message() {
			t.Fatalf("with only the keys that matter %v %s, with all %v %s\ncontainer %+v\nconfigmaps %v kept %v\n%s\n%s", df.Allowed, df.Reason, d.Allowed, d.Reason, c, cms, filtered.ConfigMaps, df.Message(), d.Message())
		}

		env, started := kubeletEnv(&c, ns, cms, secrets)
		if !started {
			return // the container never runs: nothing to fence
		}
		fencing, set := env["NOETL_EHDB_FENCING"]
		armed := set && strings.EqualFold(strings.TrimSpace(fencing), "enforce")
		env["HOSTNAME"] = wt.WriterName + "-0"
		cfg, _ := election.ParseConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if armed && !cfg.Enabled && d.Allowed {
			t.Fatalf("armed without election, allowed\ncontainer %+v\nconfigmaps %v secrets %v\nkubelet env %q\ndecision %+v", c, cms, secrets, env, d)
		}
		if armed && d.Reason == webhook.ReasonUnarmed {
			t.Fatalf("armed judged unarmed\ncontainer %+v\nconfigmaps %v secrets %v\nkubelet env %q", c, cms, secrets, env)
		}
		// Where nothing is hidden from the guard, it must see what the kubelet sets.
		if len(secretSources(&c)) == 0 {
			genv := webhook.ResolveEnv(&c, &webhook.PodContext{Template: true, Namespace: ns}, func(name string) (webhook.ConfigMapFact, bool) {
				if d, ok := cms[name]; ok {
					return webhook.ConfigMapFact{Data: d}, true
				}
				return webhook.ConfigMapFact{NotFound: true}, true
			})
			for name, want := range env {
				if name == "HOSTNAME" {
					continue
				}
				got, ok := genv.Lookup(name)
				if !ok || !got.Known() || got.Text != want {
					t.Fatalf("%s: guard %+v (set %v), kubelet %q\ncontainer %+v\nconfigmaps %v", name, got, ok, want, c, cms)
				}
			}
		}
	})
}

func secretSources(c *corev1.Container) []string {
	var out []string
	for _, f := range c.EnvFrom {
		if f.SecretRef != nil {
			out = append(out, f.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.Value == "" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	return out
}

// FuzzAdmissionReview feeds arbitrary bodies to the HTTP handler in a cluster where nothing
// exists (no ServiceAccount, no binding, no Lease): it must never panic (a recovered panic is a
// 500), and a review creating a workload whose container's last NOETL_EHDB_FENCING entry is
// the literal enforce must never be allowed.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(review(f, admissionv1.Create, stsKind, sts(wt.Armed()), nil))
	f.Add(review(f, admissionv1.Create, stsKind, sts(compliant()...), nil))
	f.Add(review(f, admissionv1.Update, stsKind, sts(compliant()...), sts()))
	f.Add(review(f, admissionv1.Create, stsKind, sts(), nil))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"w","env":[{"name":"NOETL_EHDB_FENCING","value":"enforce"}]}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`))
	f.Add([]byte(`{}`))
	f.Add(review(f, admissionv1.Create, stsKind, sts(append(compliant(), wt.Replicas(2147483647))...), nil))
	for _, s := range fuzzSubjects {
		for _, seed := range s.seeds(f) {
			f.Add(seed)
		}
	}
	// The work per input stays small whatever the engine makes of it, so the engine keeps
	// fuzzing instead of stalling on a slow input while it minimizes: bodies of at most
	// fuzzMaxBody, a work budget of fuzzWorkBudget steps and a few shards. Every property below
	// holds for any budget (a spent budget makes values unknowable, which refuses).
	for _, seed := range fuzzRBACSeeds(f) {
		f.Add(seed)
	}
	h, bound := fuzzHandler(f), fuzzBoundHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > fuzzMaxBody {
			return
		}
		if allowed := fuzzServe(t, h, body); allowed {
			if literallyArmedCreate(body) {
				t.Fatalf("armed workload allowed in an empty cluster: %s", body)
			}
			for _, s := range fuzzSubjects {
				if s.mustRefuse(body) {
					t.Fatalf("%s allowed in an empty cluster: %s", s.name, body)
				}
			}
		}
		// A review of RBAC or a ServiceAccount, again where one armed writer is bound by the chart's
		// RBAC: a change that takes its binding or its ServiceAccount away must be refused. (Other
		// bodies are not sent twice: the work per input stays that of one review.)
		if !bytes.Contains(body, []byte("rbac.authorization.k8s.io")) && !bytes.Contains(body, []byte("ServiceAccount")) {
			return
		}
		if fuzzServe(t, bound, body) && disarmsTheBoundWriter(body) {
			t.Fatalf("a change that disarms the bound writer allowed: %s", body)
		}
	})
}

// fuzzServe posts body to h and reports whether it was allowed; a 5xx or a 200 without a review
// fails the test.
func fuzzServe(t *testing.T, h http.Handler, body []byte) bool {
	rec := httptest.NewRecorder()
	// The per-input budget: the API server's own ?timeout= (the handler works to 90% of it).
	req := httptest.NewRequest(http.MethodPost, "/validate?timeout="+fuzzInputBudget.String(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
	}
	if rec.Code != 200 {
		return false
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("200 without a review: %q", rec.Body.String())
	}
	if out.Response.Result != nil && out.Response.Result.Code >= 500 {
		t.Fatalf("internal error: %s", out.Response.Result.Message)
	}
	return out.Response.Allowed
}

// fuzzBoundHandler is a cluster where exactly one armed writer (the reference writer, election
// on) runs as the chart's ServiceAccount, bound by the chart's Role and RoleBinding only.
func fuzzBoundHandler(t testing.TB) http.Handler {
	c := &wt.Resolver{ServiceAccounts: map[string]map[string]string{wt.WriterSA: nil}}
	c.Grant(ns, wt.WriterSA, ns, "get", "list", "watch", "create", "update")
	c.Roles = []rbacv1.Role{*mkRole(chartRole, leaseRule)}
	c.RoleBindings = []rbacv1.RoleBinding{*roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))}
	return webhook.NewHTTPHandler(&webhook.Handler{Resolver: c, Policy: webhook.Policy{RequireLiveLease: true, MaxShards: 4},
		LookupTimeout: fuzzInputBudget, WorkBudget: fuzzWorkBudget, Log: logr.Discard(), Accounts: fakeReaders(t, sts(compliant()...))})
}

// fuzzRBACSeeds are reviews of the chart's RBAC and the writer's ServiceAccount.
func fuzzRBACSeeds(t testing.TB) [][]byte {
	chartRB := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA, Namespace: ns}}
	noToken := sa.DeepCopy()
	noToken.AutomountServiceAccountToken = ptr.To(false)
	return [][]byte{
		rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, chartRB),
		rbacReview(t, admissionv1.Update, rbKind, chartRole, roleBinding(chartRole, "Role", chartRole, saSubject("other")), chartRB),
		rbacReview(t, admissionv1.Update, rbKind, chartRole, roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA), saSubject("more")), chartRB),
		rbacReview(t, admissionv1.Delete, roleKind, chartRole, nil, mkRole(chartRole, leaseRule)),
		rbacReview(t, admissionv1.Delete, saGVK, wt.WriterSA, nil, sa),
		rbacReview(t, admissionv1.Update, saGVK, wt.WriterSA, noToken, sa),
	}
}

// disarmsTheBoundWriter is an oracle independent of the guard's code (it decodes as the API server
// does): a DELETE of the writer's ServiceAccount, or a DELETE or UPDATE of the RoleBinding
// noetl/ehdb-shard-election whose old object binds the writer to the chart's Role and whose result
// does not.
func disarmsTheBoundWriter(body []byte) bool {
	var rv admissionv1.AdmissionReview
	if kjson.UnmarshalCaseSensitivePreserveInts(body, &rv) != nil || rv.Request == nil || rv.Request.SubResource != "" || rv.Request.Namespace != ns {
		return false
	}
	r := rv.Request
	if r.Operation != admissionv1.Delete && r.Operation != admissionv1.Update {
		return false
	}
	switch r.Kind {
	case saGVK:
		var old corev1.ServiceAccount
		return r.Operation == admissionv1.Delete && kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) == nil &&
			(r.Name == wt.WriterSA || (r.Name == "" && old.Name == wt.WriterSA))
	case rbKind:
	default:
		return false
	}
	binds := func(raw []byte) (bool, bool) {
		var rb rbacv1.RoleBinding
		if len(raw) == 0 || kjson.UnmarshalCaseSensitivePreserveInts(raw, &rb) != nil {
			return false, false
		}
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != chartRole {
			return false, true
		}
		for _, s := range rb.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == wt.WriterSA && (s.Namespace == "" || s.Namespace == ns) {
				return true, true
			}
		}
		return false, true
	}
	var old rbacv1.RoleBinding
	if kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) != nil {
		return false
	}
	if name := r.Name; name != chartRole && (name != "" || old.Name != chartRole) {
		return false
	}
	was, ok := binds(r.OldObject.Raw)
	if !ok || !was {
		return false
	}
	if r.Operation == admissionv1.Delete {
		return true
	}
	still, ok := binds(r.Object.Raw)
	return ok && !still
}

// fuzzHandler is the handler FuzzAdmissionReview feeds: an empty cluster, one ConfigMap reader.
func fuzzHandler(t testing.TB) http.Handler {
	return webhook.NewHTTPHandler(&webhook.Handler{Resolver: &wt.Resolver{}, Policy: webhook.Policy{RequireLiveLease: true, MaxShards: 4},
		LookupTimeout: fuzzInputBudget, WorkBudget: fuzzWorkBudget, Log: logr.Discard(), Readers: fuzzReaders(t), Owners: fakeOwners{}})
}

// Bounds of FuzzAdmissionReview's inputs (see there).
const (
	fuzzMaxBody    = 16 << 10
	fuzzWorkBudget = 64 << 10
)

// fuzzSubject is one kind of review beyond workloads: its seeds and an oracle, independent of the
// guard's code, of bodies that an empty cluster must refuse. Review subjects the guard gains
// (ephemeral containers, RBAC deletes) add an entry here and, if they read a watch, a fake to
// the handler above.
type fuzzSubject struct {
	name       string
	seeds      func(testing.TB) [][]byte
	mustRefuse func(body []byte) bool
}

var fuzzSubjects = []fuzzSubject{
	{
		// A ConfigMap created or edited so that its reader, the reference writer reading
		// NOETL_EHDB_FENCING from key "fencing" of ConfigMap "flags", becomes armed: nothing in
		// the empty cluster lets that writer arm.
		name: "a ConfigMap change that arms its reader",
		seeds: func(t testing.TB) [][]byte {
			return [][]byte{
				fuzzConfigMapReview(t, admissionv1.Create, map[string]string{"fencing": "enforce"}, nil),
				fuzzConfigMapReview(t, admissionv1.Update, map[string]string{"fencing": " Enforce"}, map[string]string{"fencing": "shadow"}),
				fuzzConfigMapReview(t, admissionv1.Update, map[string]string{"fencing": "shadow"}, map[string]string{"fencing": "enforce"}),
			}
		},
		mustRefuse: configMapArmsReader,
	},
}

// fuzzReaders is the reader index FuzzAdmissionReview's handler sees: the reference writer,
// reading its fencing value from ConfigMap "flags".
func fuzzReaders(t testing.TB) webhook.ConfigMapReaders {
	reader := sts(envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{webhook.ConfigMapIndex: webhook.IndexByConfigMap})
	if err := idx.Add(reader); err != nil {
		t.Fatal(err)
	}
	return webhook.IndexReaders{idx}
}

func fuzzConfigMapReview(t testing.TB, op admissionv1.Operation, data, old map[string]string) []byte {
	cm := func(d map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: d}
	}
	var oldObj runtime.Object
	if old != nil {
		oldObj = cm(old)
	}
	body := review(t, op, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, cm(data), oldObj)
	return bytes.Replace(body, []byte(`"name":"`+wt.WriterName+`"`), []byte(`"name":"flags"`), 1)
}

// configMapArmsReader: a review of ConfigMap noetl/flags whose new "fencing" is enforce and whose
// old one (if the review is an UPDATE with an old object) was not.
func configMapArmsReader(body []byte) bool {
	var rv admissionv1.AdmissionReview
	if kjson.UnmarshalCaseSensitivePreserveInts(body, &rv) != nil || rv.Request == nil || rv.Request.SubResource != "" {
		return false
	}
	r := rv.Request
	if r.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) || r.Namespace != ns || (r.Operation != admissionv1.Create && r.Operation != admissionv1.Update) {
		return false
	}
	armed := func(raw []byte) (bool, bool) {
		var cm corev1.ConfigMap
		if kjson.UnmarshalCaseSensitivePreserveInts(raw, &cm) != nil {
			return false, false
		}
		v, ok := cm.Data["fencing"]
		return ok && strings.EqualFold(strings.TrimSpace(v), "enforce"), true
	}
	var cm corev1.ConfigMap
	if kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &cm) != nil {
		return false
	}
	name := r.Name
	if name == "" {
		name = cm.Name
	}
	if name != "flags" {
		return false
	}
	now, ok := armed(r.Object.Raw)
	if !ok || !now {
		return false
	}
	if r.Operation == admissionv1.Update && len(r.OldObject.Raw) > 0 {
		if was, ok := armed(r.OldObject.Raw); ok && was {
			return false
		}
	}
	return true
}

// literallyArmedCreate is an oracle independent of the guard's code (it decodes as the API server
// does, case-sensitively, like controller-runtime's review decoder): a CREATE of a judged kind,
// not being deleted, with a container whose last NOETL_EHDB_FENCING env entry is a literal
// enforce without references.
func literallyArmedCreate(body []byte) bool {
	var rv admissionv1.AdmissionReview
	if kjson.UnmarshalCaseSensitivePreserveInts(body, &rv) != nil || rv.Request == nil || rv.Request.Operation != admissionv1.Create || rv.Request.SubResource != "" {
		return false
	}
	var spec *corev1.PodSpec
	k := rv.Request.Kind
	switch {
	case k.Group == "" && k.Version == "v1" && k.Kind == "Pod":
		var p corev1.Pod
		if kjson.UnmarshalCaseSensitivePreserveInts(rv.Request.Object.Raw, &p) != nil || p.DeletionTimestamp != nil {
			return false
		}
		spec = &p.Spec
	case k.Group == "apps" && k.Version == "v1" && k.Kind == "StatefulSet":
		var s appsv1.StatefulSet
		if kjson.UnmarshalCaseSensitivePreserveInts(rv.Request.Object.Raw, &s) != nil || s.DeletionTimestamp != nil {
			return false
		}
		spec = &s.Spec.Template.Spec
	default:
		return false
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			last := -1
			for i, e := range c.Env {
				if e.Name == "NOETL_EHDB_FENCING" {
					last = i
				}
			}
			if last >= 0 {
				e := c.Env[last]
				if e.ValueFrom == nil && !strings.Contains(e.Value, "$") && strings.EqualFold(strings.TrimSpace(e.Value), "enforce") {
					return true
				}
			}
		}
	}
	return false
}
