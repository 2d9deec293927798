package webhook

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's $(VAR) behaviour, case by case: escapes, references that are unset, empty,
// nested or unterminated, and a '$' before other runes (the corner cases the kubelet's own
// expansion tests pin, v1.37).
func TestExpandMatchesTheKubelet(t *testing.T) {
	env := &Env{vars: map[string]envEntry{
		"VAR_A":     {v: Value{Text: "A"}},
		"VAR_B":     {v: Value{Text: "B"}},
		"VAR_C":     {v: Value{Text: "C"}},
		"VAR_REF":   {v: Value{Text: "$(VAR_A)"}},
		"VAR_EMPTY": {v: Value{Text: ""}},
	}}
	cases := []struct{ in, want string }{
		{"$(VAR_A)", "A"},
		{"$(VAR_A)-$(VAR_A)", "A-A"},
		{"$(VAR_A)-1", "A-1"},
		{"___$(VAR_B)___", "___B___"},
		{"___$(VAR_C)", "___C"},
		{"$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"},
		{"$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"},
		{"$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"},
		{"f000-$$VAR_A", "f000-$VAR_A"},
		{"foo\\$(VAR_C)bar", "foo\\Cbar"},
		{"foo\\\\$(VAR_C)bar", "foo\\\\Cbar"},
		{"foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"},
		{"$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"},
		{"$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"},
		{"$(VAR_REF)", "$(VAR_A)"},
		{"%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"},
		{"foo$(VAR_EMPTY)bar", "foobar"},
		{"foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"},
		{"f00__(VAR_A)__", "f00__(VAR_A)__"},
		{"$?_boo_$!", "$?_boo_$!"},
		{"$VAR_A", "$VAR_A"},
		{"$(VAR_DNE)", "$(VAR_DNE)"},
		{"$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"},
		{"$$$$$$(VAR_A)", "$$$(VAR_A)"},
		{"$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"},
		{"$$$$$$$(VAR_A)", "$$$A"},
		{"$VAR_A)", "$VAR_A)"},
		{"${VAR_A}", "${VAR_A}"},
		{"$(VAR_B)_______$(A", "B_______$(A"},
		{"$(VAR_C)_______$(", "C_______$("},
		{"$(VAR_A)foobarzab$", "Afoobarzab$"},
		{"foo-\\$(VAR_A", "foo-\\$(VAR_A"},
		{"--$($($($($--", "--$($($($($--"},
		{"$($($($($--foo$(", "$($($($($--foo$("},
		{"foo0--$($($($(", "foo0--$($($($("},
		{"$(foo$$var)", "$(foo$$var)"},
		{"\n", "\n"},
		{"$£FOO", "$£FOO"},
		{"prefix-$€-suffix", "prefix-$€-suffix"},
		{"$中文", "$中文"},
		{"bad-$\xffbyte", "bad-$\uFFFDbyte"}, // the kubelet decodes the rune after '$'
		{"$", "$"},
		{"$()", "$()"},
	}
	for _, c := range cases {
		got := expand(c.in, env)
		if !got.Known() || got.Text != c.want {
			t.Errorf("expand(%q) = %+v, want %q", c.in, got, c.want)
		}
	}
}

func TestExpandOfAnUnknowableReferenceIsUnknowable(t *testing.T) {
	env := &Env{vars: map[string]envEntry{"S": {v: unknown("Secret x")}}}
	if v := expand("pre-$(S)", env); v.Known() {
		t.Fatalf("got %+v, want unknowable", v)
	}
	if v := expand("pre-$$(S)", env); !v.Known() || v.Text != "pre-$(S)" {
		t.Fatalf("escaped reference: got %+v", v)
	}
}

func cmSource(cms map[string]map[string]string, errs map[string]error) ConfigMapSource {
	return func(name string) (ConfigMapFact, bool) {
		if err, ok := errs[name]; ok {
			return ConfigMapFact{Err: err}, true
		}
		if d, ok := cms[name]; ok {
			return ConfigMapFact{Data: d}, true
		}
		return ConfigMapFact{NotFound: true}, true
	}
}

func cmRef(name string, optional bool, prefix string) corev1.EnvFromSource {
	return corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: ptr.To(optional)}}
}

func cmKeyRef(name, cm, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key, Optional: ptr.To(optional)}}}
}

func fieldRef(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func TestResolveEnvLikeTheKubelet(t *testing.T) {
	cms := map[string]map[string]string{
		"flags": {"NOETL_EHDB_FENCING": "enforce", "MODE": "shadow"},
		"other": {"NOETL_EHDB_FENCING": "off"},
	}
	errs := map[string]error{"broken": errors.New("etcdserver: request timed out")}
	tmpl := &PodContext{Template: true, Namespace: "noetl", Meta: PodMeta{Labels: map[string]string{"app": "w"}},
		Spec: &corev1.PodSpec{ServiceAccountName: "writer", OS: &corev1.PodOS{Name: corev1.Linux}}}
	pod := &PodContext{Namespace: "noetl", Meta: PodMeta{Name: "w-0", Labels: map[string]string{"app": "w", "b": "2"}},
		Spec: &corev1.PodSpec{NodeName: "n1", OS: &corev1.PodOS{Name: corev1.Linux}}}
	// anyOS is tmpl on a node that may match names regardless of case (envnames.go).
	anyOS := &PodContext{Template: true, Namespace: "noetl", Meta: tmpl.Meta, Spec: &corev1.PodSpec{ServiceAccountName: "writer"}}

	type want struct {
		text    string
		unknown string // substring of the reasons; "" means known
		pending string
		unset   bool
	}
	cases := []struct {
		name    string
		c       corev1.Container
		pod     *PodContext
		pending bool // ConfigMaps not read yet
		want    want
	}{
		{"literal", corev1.Container{Env: []corev1.EnvVar{{Name: "X", Value: "v"}}}, tmpl, false, want{text: "v"}},
		{"unset", corev1.Container{}, tmpl, false, want{unset: true}},
		{"empty literal is set", corev1.Container{Env: []corev1.EnvVar{{Name: "X"}}}, tmpl, false, want{text: ""}},
		{"later duplicate wins", corev1.Container{Env: []corev1.EnvVar{{Name: "X", Value: "a"}, {Name: "X", Value: "b"}}}, tmpl, false, want{text: "b"}},
		{"env beats envFrom", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("flags", false, "")},
			Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "off"}}}, tmpl, false, want{text: "off"}},
		{"later envFrom wins", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("flags", false, ""), cmRef("other", false, "")}}, tmpl, false, want{text: "off"}},
		{"envFrom prefix", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("flags", false, "NOETL_EHDB_")}}, tmpl, false, want{unset: true}},
		{"expansion sees envFrom", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("flags", false, "")},
			Env: []corev1.EnvVar{{Name: "X", Value: "$(MODE)-$(NOPE)"}}}, tmpl, false, want{text: "shadow-$(NOPE)"}},
		{"expansion sees earlier env only", corev1.Container{Env: []corev1.EnvVar{{Name: "X", Value: "$(Y)"}, {Name: "Y", Value: "y"}}}, tmpl, false, want{text: "$(Y)"}},
		{"configMapKeyRef", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "flags", "MODE", false)}}, tmpl, false, want{text: "shadow"}},
		{"optional configMapKeyRef, missing key, keeps envFrom value", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("flags", false, "")},
			Env: []corev1.EnvVar{cmKeyRef("MODE", "flags", "NOPE", true)}}, tmpl, false, want{text: "shadow"}},
		{"optional configMapKeyRef, missing ConfigMap", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "absent", "k", true)}}, tmpl, false, want{unset: true}},
		{"configMapKeyRef, missing ConfigMap: the container waits for it, nothing set now", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "absent", "k", false)}}, tmpl, false, want{unset: true}},
		{"configMapKeyRef, missing key: the container waits for it, nothing set now", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "flags", "k", false)}}, tmpl, false, want{unset: true}},
		{"configMapKeyRef, unreadable", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "broken", "k", true)}}, tmpl, false, want{unknown: "could not be read"}},
		{"configMapKeyRef, not read yet", corev1.Container{Env: []corev1.EnvVar{cmKeyRef("X", "flags", "MODE", false)}}, tmpl, true, want{pending: "flags"}},
		{"optional envFrom, missing", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("absent", true, "")}}, tmpl, false, want{unset: true}},
		{"envFrom, missing: the container waits for it, nothing set now", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("absent", false, "")}}, tmpl, false, want{unset: true}},
		{"envFrom, missing, other prefix", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("absent", false, "Y_")}}, tmpl, false, want{unset: true}},
		{"envFrom Secret", corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}}, tmpl, false, want{unknown: "Secret \"s\""}},
		{"envFrom Secret shadows an earlier envFrom", corev1.Container{EnvFrom: []corev1.EnvFromSource{cmRef("other", false, ""),
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}}, tmpl, false, want{unknown: "Secret \"s\""}},
		{"envFrom Secret then env", corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}},
			Env: []corev1.EnvVar{{Name: "X", Value: "mine"}}}, tmpl, false, want{text: "mine"}},
		{"envFrom Secret then env, on any OS", corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}},
			Env: []corev1.EnvVar{{Name: "X", Value: "mine"}}}, anyOS, false, want{unknown: "may set X in another case"}},
		{"a name in another case, on any OS", corev1.Container{Env: []corev1.EnvVar{{Name: "x", Value: "mine"}}}, anyOS, false, want{text: "mine"}},
		{"a name in another case, on Linux", corev1.Container{Env: []corev1.EnvVar{{Name: "x", Value: "mine"}}}, tmpl, false, want{unset: true}},
		{"expansion is by exact name, on any OS", corev1.Container{Env: []corev1.EnvVar{{Name: "m", Value: "enforce"}, {Name: "X", Value: "$(M)"}}}, anyOS, false, want{text: "$(M)"}},
		{"a value up to its NUL byte", corev1.Container{Env: []corev1.EnvVar{{Name: "X", Value: "enforce\x00off"}}}, tmpl, false, want{text: "enforce"}},
		{"secretKeyRef", corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}}, tmpl, false, want{unknown: "Secret \"s\" key \"k\""}},
		{"expansion of a Secret value", corev1.Container{Env: []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}, {Name: "X", Value: "$(S)"}}}, tmpl, false, want{unknown: "Secret"}},
		{"valueFrom is not expanded", corev1.Container{Env: []corev1.EnvVar{{Name: "M", Value: "m"}, cmKeyRef("X", "lit", "v", false)}}, tmpl, false, want{text: "$(M)"}},
		{"fieldRef namespace", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.namespace")}}, tmpl, false, want{text: "noetl"}},
		{"fieldRef name in a template", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.name")}}, tmpl, false, want{unknown: "metadata.name"}},
		{"fieldRef name in a pod", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.name")}}, pod, false, want{text: "w-0"}},
		{"fieldRef label in the template", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.labels['app']")}}, tmpl, false, want{text: "w"}},
		{"fieldRef label not in the template", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.labels['pod-template-hash']")}}, tmpl, false, want{unknown: "controller"}},
		{"fieldRef label missing on a pod", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.labels['nope']")}}, pod, false, want{text: ""}},
		{"fieldRef labels of a pod", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "metadata.labels")}}, pod, false, want{text: "app=\"w\"\nb=\"2\""}},
		{"fieldRef serviceAccountName", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "spec.serviceAccountName")}}, tmpl, false, want{text: "writer"}},
		{"fieldRef nodeName in a template", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "spec.nodeName")}}, tmpl, false, want{unknown: "scheduler"}},
		{"fieldRef nodeName of a bound pod", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "spec.nodeName")}}, pod, false, want{text: "n1"}},
		{"fieldRef podIP", corev1.Container{Env: []corev1.EnvVar{fieldRef("X", "status.podIP")}}, pod, false, want{unknown: "runs"}},
		{"resourceFieldRef", corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}}}}, tmpl, false, want{unknown: "node"}},
	}
	cms["lit"] = map[string]string{"v": "$(M)"}
	// The variable each case looks at, when it is not X.
	lookAt := map[string]string{
		"env beats envFrom":                         "NOETL_EHDB_FENCING",
		"later envFrom wins":                        "NOETL_EHDB_FENCING",
		"envFrom prefix":                            "NOETL_EHDB_FENCING",
		"envFrom Secret shadows an earlier envFrom": "NOETL_EHDB_FENCING",
		"optional configMapKeyRef, missing key, keeps envFrom value": "MODE",
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := cmSource(cms, errs)
			if c.pending {
				src = func(string) (ConfigMapFact, bool) { return ConfigMapFact{}, false }
			}
			env := ResolveEnv(&c.c, c.pod, src)
			name := lookAt[c.name]
			if name == "" {
				name = "X"
			}
			v, ok := env.Lookup(name)
			switch {
			case c.want.unset:
				if ok {
					t.Fatalf("%s = %+v, want unset", name, v)
				}
			case !ok:
				t.Fatalf("%s unset", name)
			case c.want.pending != "":
				if v.Known() || len(v.Unknown.Pending) != 1 || v.Unknown.Pending[0] != c.want.pending {
					t.Fatalf("%s = %+v, want pending on %s", name, v, c.want.pending)
				}
			case c.want.unknown != "":
				if v.Known() || !strings.Contains(v.Unknown.String(), c.want.unknown) {
					t.Fatalf("%s = %+v, want unknowable mentioning %q", name, v, c.want.unknown)
				}
			default:
				if !v.Known() || v.Text != c.want.text {
					t.Fatalf("%s = %+v, want %q", name, v, c.want.text)
				}
			}
		})
	}
}
