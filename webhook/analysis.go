package webhook

import (
	"fmt"

	"strings"

	corev1 "k8s.io/api/core/v1"
)

// containerView is one container judged against the facts at hand.
type containerView struct {
	c *corev1.Container
	// role is "container", "init container" or "ephemeral container".
	role  string
	env   *Env
	armed bool
	// why says what makes it armed: the literal value, or why the value cannot be known.
	why string
	// pending lists ConfigMaps needed before armed can be decided.
	pending []string
	// unknowable is true when armed only because the value cannot be known.
	unknowable bool
}

func (v *containerView) label() string {
	return v.role + " " + quote(v.c.Name)
}

// view resolves every container of w against cms, spending from budget.
func view(w *Workload, cms ConfigMapSource, budget *Budget) []containerView {
	if w == nil {
		return nil
	}
	cs := w.Containers()
	out := make([]containerView, len(cs))
	for i, c := range cs {
		env := resolveEnv(c, &w.Pod, cms, budget)
		cv := containerView{c: c, role: w.containerRole(i), env: env}
		if v, ok := env.Lookup(EnvFencing); ok {
			switch {
			case v.Known():
				if strings.EqualFold(strings.TrimSpace(v.Text), "enforce") {
					cv.armed = true
					cv.why = fmt.Sprintf("%s=%.32q", EnvFencing, v.Text) // its own value: "enforce", up to case and spaces (a megabyte of them)
					if v.Read {
						// A review is answered to whoever sends it: no ConfigMap value is quoted,
						// not even one that says enforce in its own case and spacing (the sixth
						// red team).
						cv.why = EnvFencing + "=enforce (read from a ConfigMap, up to case and spaces)"
					}
				}
			case len(v.Unknown.Pending) > 0:
				cv.pending = v.Unknown.Pending
			default:
				cv.armed, cv.unknowable = true, true
				cv.why = EnvFencing + " cannot be known (" + v.Unknown.String() + "), so it counts as enforce"
			}
		}
		out[i] = cv
	}
	return out
}

// referencedConfigMaps lists every ConfigMap a container's environment reads.
func referencedConfigMaps(c *corev1.Container) []string {
	var out []string
	for _, f := range c.EnvFrom {
		if f.ConfigMapRef != nil {
			out = appendNew(out, f.ConfigMapRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.Value == "" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			out = appendNew(out, e.ValueFrom.ConfigMapKeyRef.Name)
		}
	}
	return out
}

func hasPendingConfigMaps(in Input, c *corev1.Container, f *Facts) bool {
	for _, name := range referencedConfigMaps(c) {
		if in.ConfigMapChange != nil && name == in.ConfigMapChange.Name {
			continue
		}
		if _, ok := f.ConfigMaps[name]; !ok {
			return true
		}
	}
	return false
}

// tooManyConfigMaps returns the number of distinct ConfigMaps w's containers read when it is
// above the policy's limit, else 0. A container whose own env fixes the fencing switch to a literal
// other than enforce is left out: the kubelet applies env after envFrom, the last entry of a name
// winning, so nothing its ConfigMaps hold can arm it, and the guard reads none of them for it.
func tooManyConfigMaps(w *Workload, p Policy) int {
	seen := map[string]bool{}
	for _, c := range w.Containers() {
		if unarmedLiterally(c, envNamesOf(&w.Pod)) {
			continue
		}
		for _, f := range c.EnvFrom {
			if f.ConfigMapRef != nil {
				seen[f.ConfigMapRef.Name] = true
			}
		}
		for i := range c.Env {
			if r := c.Env[i].ValueFrom; c.Env[i].Value == "" && r != nil && r.ConfigMapKeyRef != nil {
				seen[r.ConfigMapKeyRef.Name] = true
			}
		}
	}
	if len(seen) > p.maxConfigMaps() {
		return len(seen)
	}
	return 0
}

// unarmedLiterally reports whether c's last env entry for the fencing switch is a literal that is
// not enforce and refers to nothing ($( ... ) could expand to anything). On a node that matches
// names regardless of case (names.fold), another entry or an envFrom source may set the switch in
// another case that the literal does not replace, so only a container with neither qualifies.
func unarmedLiterally(c *corev1.Container, names envNames) bool {
	if names.fold {
		for _, f := range c.EnvFrom {
			if mayHavePrefix(EnvFencing, f.Prefix) {
				return false
			}
		}
		for _, e := range c.Env {
			if mayBeName(e.Name, EnvFencing) && e.Name != EnvFencing {
				return false
			}
		}
	}
	for i := len(c.Env) - 1; i >= 0; i-- {
		e := &c.Env[i]
		if e.Name != EnvFencing {
			continue
		}
		return e.ValueFrom == nil && !strings.Contains(e.Value, "$(") && !strings.EqualFold(strings.TrimSpace(e.Value), "enforce")
	}
	return false
}
