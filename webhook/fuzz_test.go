package webhook_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The alphabet env programs are written in.
var (
	fzNames    = []string{"NOETL_EHDB_FENCING", "NOETL_EHDB_ELECTION", "MODE", "NOETL_EHDB_ELECTION_SHARD", "FENCING", "ELECTION", "noetl_ehdb_fencing", "Noetl_Ehdb_Election"}
	fzValues   = []string{"enforce", " EnForce\t", "off", "$(MODE)", "$$(MODE)", "true", "1", "yes", "", "$(NOETL_EHDB_FENCING)", "en$(MODE)", "force", "0", "$(FENCING)", "enforce\x00off", "$(mode)"}
	fzPrefixes = []string{"", "NOETL_EHDB_", "X_", "NOETL_", "noetl_ehdb_"}
	fzCMs      = []string{"cm0", "cm1", "missing"}
	fzSecrets  = []string{"s0", "s1", "gone"}
)

// program turns fuzz bytes into a container's env/envFrom, the ConfigMaps the guard can read and
// the Secrets only the kubelet can.
func program(data []byte) (c corev1.Container, cms, secrets map[string]map[string]string) {
	b := &fuzzBytes{data: data}
	cms = map[string]map[string]string{"cm0": {}, "cm1": {}}
	secrets = map[string]map[string]string{"s0": {}, "s1": {}}
	// Contents first: a few keys per ConfigMap and Secret.
	for _, m := range []map[string]string{cms["cm0"], cms["cm1"], secrets["s0"], secrets["s1"]} {
		for n := b.pick(3); n > 0; n-- {
			m[fzNames[b.pick(len(fzNames))]] = fzValues[b.pick(len(fzValues))]
		}
	}
	c = envProgram(b)
	return c, cms, secrets
}

// envProgram is the rest of b as a container's env and envFrom entries.
func envProgram(b *fuzzBytes) (c corev1.Container) {
	c.Name = "noetl-worker"
	for b.more() {
		switch b.pick(7) {
		case 0:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[b.pick(len(fzNames))], Value: fzValues[b.pick(len(fzValues))]})
		case 1:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[b.pick(len(fzNames))], ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzCMs[b.pick(len(fzCMs))]}, Key: fzNames[b.pick(len(fzNames))], Optional: ptr.To(b.pick(2) == 1)}}})
		case 2:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[b.pick(len(fzNames))], ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzSecrets[b.pick(len(fzSecrets))]}, Key: fzNames[b.pick(len(fzNames))], Optional: ptr.To(b.pick(2) == 1)}}})
		case 3:
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: fzPrefixes[b.pick(len(fzPrefixes))], ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzCMs[b.pick(len(fzCMs))]}, Optional: ptr.To(b.pick(2) == 1)}})
		case 4:
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: fzPrefixes[b.pick(len(fzPrefixes))], SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: fzSecrets[b.pick(len(fzSecrets))]}, Optional: ptr.To(b.pick(2) == 1)}})
		case 5:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[b.pick(len(fzNames))], ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
		case 6:
			c.Env = append(c.Env, corev1.EnvVar{Name: fzNames[b.pick(len(fzNames))]})
		}
	}
	return c
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
// cluster where everything but the program is in order, on a pod certain to run on Linux (an even
// number of bytes) or one that may run on Windows, where the process reads any variant of a name
// up to case (envnames.go), and sees each value up to its first NUL byte:
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

		linux := len(data)%2 == 0
		s := sts(wt.ServiceAccount(wt.WriterSA), func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers = []corev1.Container{c}
			if linux {
				s.Spec.Template.Spec.OS = &corev1.PodOS{Name: corev1.Linux}
			}
		})
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
		env["HOSTNAME"] = wt.WriterName + "-0"
		// The process's view: on Linux the exact name; on Windows any variant of it, so armed if
		// any variant arms, and the election certain only if it is on whichever variant is read.
		views := processViews(env, linux)
		armed, electionOff := false, false
		for _, view := range views {
			if fencing, set := view("NOETL_EHDB_FENCING"); set && strings.EqualFold(strings.TrimSpace(fencing), "enforce") {
				armed = true
			}
			if cfg, _ := electionenv.Parse(view); !cfg.Enabled {
				electionOff = true
			}
		}
		if armed && electionOff && d.Allowed {
			t.Fatalf("armed without election, allowed\ncontainer %+v\nconfigmaps %v secrets %v\nkubelet env %q\ndecision %+v", c, cms, secrets, env, d)
		}
		if armed && d.Reason == webhook.ReasonUnarmed {
			t.Fatalf("armed judged unarmed\ncontainer %+v\nconfigmaps %v secrets %v\nkubelet env %q", c, cms, secrets, env)
		}
		// Where nothing is hidden from the guard, it must see what the kubelet sets.
		if len(secretSources(&c)) == 0 && linux {
			genv := webhook.ResolveEnv(&c, &webhook.PodContext{Template: true, Namespace: ns, Spec: &corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Linux}}}, func(name string) (webhook.ConfigMapFact, bool) {
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
				if want, _, _ = strings.Cut(want, "\x00"); !ok || !got.Known() || got.Text != want {
					t.Fatalf("%s: guard %+v (set %v), kubelet %q\ncontainer %+v\nconfigmaps %v", name, got, ok, want, c, cms)
				}
			}
		}
	})
}

// processViews are the environments a container's process may read from the kubelet's env: the
// exact one on Linux; on Windows one per way of picking, for each name up to case, the variant
// read (the first and the last of each, by name, which covers a name with two variants), each
// value up to its first NUL byte.
func processViews(env map[string]string, linux bool) []func(string) (string, bool) {
	seen := func(v string) string { v, _, _ = strings.Cut(v, "\x00"); return v }
	if linux {
		return []func(string) (string, bool){func(k string) (string, bool) { v, ok := env[k]; return seen(v), ok }}
	}
	pick := func(last bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			best, found := "", false
			for name := range env {
				if strings.EqualFold(name, k) && (!found || (name > best) == last) {
					best, found = name, true
				}
			}
			return seen(env[best]), found
		}
	}
	return []func(string) (string, bool){pick(false), pick(true)}
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
