package webhook

import (
	"fmt"
	"path"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// This file answers "does the armed container authenticate as its ServiceAccount, to the API
// server whose Leases the guard checks?". The election builds its client with client-go's
// rest.InClusterConfig, which dials KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT from the
// environment and reads the fixed files saDir/token and saDir/ca.crt (its namespace, when the
// environment names none, from saDir/namespace). What is at those paths is decided by the
// container's mounts: the guard works it out from them, never from "a token volume exists".

// saDir is where client-go's in-cluster configuration reads the token, the CA and the namespace
// (rest.InClusterConfig; the ServiceAccount admission plugin's DefaultAPITokenMountPath).
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// pluginVolumePrefix names the volume the ServiceAccount admission plugin mounts at saDir
// (ServiceAccountVolumeName + "-"): a volume of the pod already named so is the one it mounts.
const pluginVolumePrefix = "kube-api-access-"

// apiServerVars are the variables rest.InClusterConfig dials. The kubelet sets them for the
// cluster's API server in every container (getServiceEnvVarMap: the default namespace's
// kubernetes Service, whatever enableServiceLinks says), and a variable the container's env or
// envFrom sets replaces the kubelet's (makeEnvironmentVariables).
var apiServerVars = []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}

// checkAPIServer refuses an armed container whose environment sets the API server's address:
// its election would dial that address, and the guard cannot tell it is the API server whose
// Leases it checks (empty, client-go finds no in-cluster configuration and the election
// declines). A source that only may set it (an envFrom Secret) is said in a warning: refusing
// every writer that reads credentials with envFrom would be a wrong refusal.
func (d *Decision) checkAPIServer(v *containerView) {
	var maybe []string
	var from *Unknown
	for _, name := range apiServerVars {
		val, set := v.env.Lookup(name)
		switch {
		case !set:
		case val.Known() && val.Text == "$("+name+")":
			// Left literal by the guard's expansion, so nothing before it set the name: the
			// kubelet expands it to its own service variable (makeEnvironmentVariables).
		case !v.env.setByContainer(name):
			maybe, from = append(maybe, name), from.merge(val.Unknown)
		default:
			what := ""
			switch {
			case !val.Known():
				what = fmt.Sprintf("sets %s from %s, which the guard cannot read, so its election dials an address the kubelet did not choose", name, val.Unknown.String())
			case strings.TrimSpace(val.Text) == "":
				what = fmt.Sprintf("sets %s empty, so client-go finds no in-cluster configuration and the election declines", name)
			default:
				what = fmt.Sprintf("sets %s=%s, so its election dials that address, not the cluster's API server the kubelet names; the guard cannot tell it is the one whose Leases it checks", name, val.shown(-1))
			}
			d.unmet(ReasonOtherAPIServer, fmt.Sprintf("%s %s.", v.label(), what),
				fmt.Sprintf("remove %s from the env and envFrom sources of %s: the kubelet sets it for the cluster's API server in every container.", name, v.label()))
		}
	}
	if len(maybe) > 0 {
		d.warn(truncate(fmt.Sprintf("%s: if %s is set by %s, its election dials that address, not the API server whose Leases the guard checked.", v.label(), strings.Join(maybe, " or "), truncate(from.String(), 80)), 240))
	}
	if arg, ok := kubeconfigArg(v.c); ok {
		d.warn(truncate(fmt.Sprintf("%s passes %s: ehdb-writer then builds its client from that kubeconfig, not the in-cluster configuration the guard judged, and the guard cannot tell which API server it names.", v.label(), quote(arg)), 240))
	}
}

// kubeconfigArg finds a --kubeconfig flag (Go's flag package also takes -kubeconfig) in the
// container's command or args: cmd/ehdb-writer then ignores the in-cluster configuration.
func kubeconfigArg(c *corev1.Container) (string, bool) {
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "kubeconfig" {
			return a, true
		}
	}
	return "", false
}

// checkToken requires each armed container to hold its ServiceAccount's token and the cluster's
// CA where client-go reads them, as the container will run: the mounts as the ServiceAccount
// admission plugin leaves them (for a Pod, the mounts it has: the plugin and every mutating
// webhook have already run), and the deepest mount covering each path (the container runtime
// mounts parents first).
func (d *Decision) checkToken(w *Workload, where, saName string, automount bool, from string, armed []*containerView) {
	spec := w.Pod.Spec
	if spec == nil {
		return
	}
	for _, v := range armed {
		problems := credentialProblems(w, v, automount)
		if len(problems) == 0 {
			continue
		}
		off := ""
		if !automount && w.Pod.Template {
			off = fmt.Sprintf(" (%s is false)", from)
		}
		fix := fmt.Sprintf("mount nothing of your own at or under %s in %s and leave the ServiceAccount admission plugin's token there, or mount there a projected volume with a serviceAccountToken source (path token, no audience) and the ConfigMap kube-root-ca.crt (ca.crt), as the plugin does.", saDir, v.label())
		if !automount && w.Pod.Template {
			fix = fmt.Sprintf("remove automountServiceAccountToken: false (or set it to true in %s), or ", where) + fix
		}
		d.unmet(ReasonNoToken,
			fmt.Sprintf("%s cannot authenticate to the API server as ServiceAccount %s%s: client-go reads %s, so the election can neither read nor renew its Lease.", v.label(), quote(saName), off, strings.Join(problems, "; and ")),
			fix)
	}
}

// credentialProblems says why container v of w cannot authenticate as its ServiceAccount to the
// API server the guard checks: what it finds at the token and CA paths, as it will run, and
// whether it can read the token as the kubelet wrote it. None: it can.
func credentialProblems(w *Workload, v *containerView, automount bool) []string {
	mounts := mountsAsRun(w, v, automount)
	var problems []string
	if p := tokenProblem(fileAt(w.Pod.Spec, mounts, saDir+"/token")); p != "" {
		problems = append(problems, p)
	}
	if p := caProblem(fileAt(w.Pod.Spec, mounts, saDir+"/ca.crt")); p != "" {
		problems = append(problems, p)
	}
	if p := latecomerProblem(w, v); p != "" {
		problems = append(problems, p)
	}
	return problems
}

// latecomerProblem says why an ephemeral container cannot read the Pod's token ("" when it can):
// when every init and regular container runs as one user and no fsGroup is set, the kubelet wrote
// the token at mode 0600 for that user as the Pod started (pkg/volume/projected; FsUserFrom), and an
// ephemeral container added later that runs as another (or as the image's unknown user) cannot
// read it until a rewrite (the tenth red team).
func latecomerProblem(w *Workload, v *containerView) string {
	spec := w.Pod.Spec
	if v.role != "ephemeral container" || w.Pod.Template || spec == nil || (spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil) {
		return ""
	}
	runAs := func(sc *corev1.SecurityContext) *int64 {
		if sc != nil && sc.RunAsUser != nil {
			return sc.RunAsUser
		}
		if spec.SecurityContext != nil {
			return spec.SecurityContext.RunAsUser
		}
		return nil
	}
	var owner *int64
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			u := runAs(cs[i].SecurityContext)
			if u == nil || owner != nil && *owner != *u {
				return ""
			}
			owner = u
		}
	}
	if owner == nil {
		return ""
	}
	if u := runAs(v.c.SecurityContext); u == nil || *u != *owner {
		return fmt.Sprintf("%s/token: the kubelet wrote it at mode 0600 for user %d, whom every container of the Pod runs as, when the Pod started, and %s does not run as that user", saDir, *owner, v.label())
	}
	return ""
}

// automountOf is whether the ServiceAccount admission plugin will mount the token in the pods of
// w (shouldAutomount: the pod's field, else the ServiceAccount's, else true) and what says so.
// known is false when that depends on a ServiceAccount that could not be read (already reported).
func automountOf(w *Workload, where, saName string, sa *ServiceAccountFact) (automount bool, from string, known bool) {
	spec := w.Pod.Spec
	switch {
	case spec == nil:
		return true, "", false
	case spec.AutomountServiceAccountToken != nil:
		return *spec.AutomountServiceAccountToken, where + ".automountServiceAccountToken", true
	case sa != nil && sa.AutomountToken != nil:
		return *sa.AutomountToken, "ServiceAccount " + quote(saName) + " automountServiceAccountToken", true
	case sa == nil && saName != "default" && w.Pod.Template:
		return true, "", false
	}
	return true, "", true
}

// namespaceFileProblem says why the namespace file an election without a namespace in its
// environment reads (saDir/namespace) is not the pod's namespace ("" when it is).
func namespaceFileProblem(w *Workload, v *containerView, automount bool) string {
	if w.Pod.Spec == nil {
		return ""
	}
	f := fileAt(w.Pod.Spec, mountsAsRun(w, v, automount), saDir+"/namespace")
	p, why := only(f)
	switch {
	case why != "":
		return f.target + ": " + why
	case p.kind != "downwardAPI" || p.field != "metadata.namespace":
		return f.target + ": " + f.describe()
	}
	f.subPath = false // a pod's namespace never changes: a copy of it stays true
	return readProblem(f, p)
}

// mountsAsRun is the container's volume mounts as the pod will run: for a pod template, with the
// mount the ServiceAccount admission plugin adds (mountServiceAccountToken): when the token is
// automounted, to every init and regular container that has no mount whose path is exactly
// saDir, of the pod's first volume named kube-api-access-*, else of its own projected volume.
// Ephemeral containers get none. A Pod's mounts are taken as they are.
func mountsAsRun(w *Workload, v *containerView, automount bool) []corev1.VolumeMount {
	mounts := v.c.VolumeMounts
	if !w.Pod.Template || !automount || v.role == "ephemeral container" {
		return mounts
	}
	for _, m := range mounts {
		if m.MountPath == saDir {
			return mounts
		}
	}
	name := pluginVolume
	for _, vol := range w.Pod.Spec.Volumes {
		if strings.HasPrefix(vol.Name, pluginVolumePrefix) {
			name = vol.Name
			break
		}
	}
	return append(append([]corev1.VolumeMount(nil), mounts...), corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: saDir})
}

// pluginVolume stands for the projected volume the plugin adds under a generated name.
const pluginVolume = pluginVolumePrefix + "(added by the ServiceAccount admission plugin)"

// pluginVolumeSource is that volume (TokenVolumeSource): the token for the API server's own
// audience, the cluster's CA from kube-root-ca.crt, and the namespace.
var pluginVolumeSource = corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
	{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
	{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMap}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
	{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
}}}

// rootCAConfigMap is the ConfigMap the root-CA publisher keeps in every namespace.
const rootCAConfigMap = "kube-root-ca.crt"

// mountedFile is what provides one file of the container: a volume and the path inside it.
type mountedFile struct {
	target  string
	volume  string
	src     *corev1.VolumeSource
	rel     string // the path inside the volume
	subPath bool   // mounted by subPath: a copy the kubelet never updates
	problem string // why it cannot be told, or that nothing is mounted there
}

// fileAt finds the mount that provides target: the one with the deepest path at or above it. Two
// mounts at the same path (one spelled with a trailing slash, which the plugin's exact comparison
// does not see) leave it to the runtime's order, and a subPathExpr is expanded at run time.
func fileAt(spec *corev1.PodSpec, mounts []corev1.VolumeMount, target string) mountedFile {
	f := mountedFile{target: target}
	best, depth, ties := -1, -1, 0
	for i, m := range mounts {
		p := runtimePath(m.MountPath)
		if p != target && !strings.HasPrefix(target, strings.TrimSuffix(p, "/")+"/") {
			continue
		}
		switch d := strings.Count(strings.TrimSuffix(p, "/"), "/"); {
		case d > depth:
			best, depth, ties = i, d, 0
		case d == depth:
			ties++
		}
	}
	if best < 0 {
		f.problem = "nothing is mounted at " + target
		return f
	}
	m := mounts[best]
	mp := runtimePath(m.MountPath)
	if ties > 0 {
		f.problem = fmt.Sprintf("there are two mounts at %s, and which one is on top is the container runtime's choice", mp)
		return f
	}
	if m.SubPathExpr != "" {
		f.problem = fmt.Sprintf("the mount of volume %s at %s has a subPathExpr, expanded only at run time", quote(m.Name), mp)
		return f
	}
	// A mount at /run/… lands at /var/run/… only in an image that links them (the project's own
	// FROM-scratch image does not), and the runtime orders mounts by the path as written: such a
	// mount can hide what client-go reads, never be known to provide it.
	if written := path.Clean("/" + m.MountPath); written != mp {
		f.problem = fmt.Sprintf("the mount of volume %s at %s is at %s only in an image where /var/run is a symlink to /run, which the guard cannot see", quote(m.Name), written, mp)
		return f
	}
	for _, o := range mounts {
		op := runtimePath(o.MountPath)
		// The kubelet writes a volume's files as symlinks into ..data, itself a symlink to a
		// ..<timestamp> directory (its atomic writer): a mount at such a name inside the volume's
		// mount is what the files resolve to.
		if rest, ok := strings.CutPrefix(op, strings.TrimSuffix(mp, "/")+"/"); ok && strings.HasPrefix(rest, "..") {
			f.problem = fmt.Sprintf("volume %s is mounted at %s, inside the mount at %s: the kubelet's files there are symlinks through ..data, so they resolve into it", quote(o.Name), op, mp)
			return f
		}
		// A volume it writes so, mounted above, holds the mount point inside a ..<timestamp>
		// directory, which its next rewrite replaces: the token's mount is then gone from the path.
		if op != mp && strings.HasPrefix(mp, strings.TrimSuffix(op, "/")+"/") && atomicWriter(spec, o.Name) {
			f.problem = fmt.Sprintf("volume %s is mounted at %s, above the mount at %s: the kubelet rewrites its files through ..data, and a rewrite leaves the mount at %s behind", quote(o.Name), op, mp, mp)
			return f
		}
	}
	f.volume = m.Name
	f.rel = strings.TrimPrefix(strings.TrimPrefix(target, mp), "/")
	if m.SubPath != "" {
		f.rel, f.subPath = path.Join(m.SubPath, f.rel), true
	}
	f.rel = strings.TrimPrefix(path.Clean("/"+f.rel), "/")
	if m.Name == pluginVolume {
		f.src = &pluginVolumeSource
		return f
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == m.Name {
			f.src = &spec.Volumes[i].VolumeSource
			return f
		}
	}
	f.problem = fmt.Sprintf("the pod has no volume %s for the mount at %s", quote(m.Name), mp)
	return f
}

// atomicWriter reports whether the pod's volume name is one the kubelet writes through ..data
// (configMap, secret, downwardAPI, projected; the plugin's token volume is projected).
func atomicWriter(spec *corev1.PodSpec, name string) bool {
	if name == pluginVolume {
		return true
	}
	for i := range spec.Volumes {
		if v := &spec.Volumes[i]; v.Name == name {
			return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
		}
	}
	return false
}

// runtimePath is a mount path as it may land in the container: cleaned, and with /var/run for
// /run, which many images link (Debian, Ubuntu, Alpine, distroless; not a FROM-scratch one), so
// a mount at /run/secrets/kubernetes.io/serviceaccount may cover where client-go reads (fileAt
// lets such a mount hide the token, never provide it). Other symlinks an image may have are out
// of the guard's sight (README limits).
func runtimePath(p string) string {
	p = path.Clean("/" + p)
	if p == "/run" || strings.HasPrefix(p, "/run/") {
		return "/var" + p
	}
	return p
}

// provider is one volume source that may write the file.
type provider struct {
	kind     string // "serviceAccountToken", "configMap", "secret", "downwardAPI", or another source kind
	audience string // serviceAccountToken
	name     string // configMap or secret
	key      string // configMap key ("" when the whole ConfigMap, keys unknown)
	field    string // downwardAPI fieldRef path
	// mode is the file's mode as the volume asks (the item's, else the volume's default, else
	// the API's default 0644); user the owner it names, if any (defaultUser, an item's user).
	mode int32
	user *int64
}

// providers lists the sources of f's volume that may write f.rel: projected sources, or the one
// source of a configMap, secret or downwardAPI volume, read as the kubelet writes them (a source
// without items writes every key as a file, so it may write any path).
func providers(f mountedFile) []provider {
	if f.src == nil {
		return nil
	}
	var sources []corev1.VolumeProjection
	var defMode *int32
	var defUser *int64
	switch s := f.src; {
	case s.Projected != nil:
		sources, defMode, defUser = s.Projected.Sources, s.Projected.DefaultMode, s.Projected.DefaultUser
	case s.ConfigMap != nil:
		sources = []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: s.ConfigMap.Name}, Items: s.ConfigMap.Items}}}
		defMode, defUser = s.ConfigMap.DefaultMode, s.ConfigMap.DefaultUser
	case s.Secret != nil:
		sources = []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: s.Secret.SecretName}, Items: s.Secret.Items}}}
		defMode, defUser = s.Secret.DefaultMode, s.Secret.DefaultUser
	case s.DownwardAPI != nil:
		sources = []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: s.DownwardAPI.Items}}}
		defMode, defUser = s.DownwardAPI.DefaultMode, s.DownwardAPI.DefaultUser
	default:
		return nil
	}
	// The kubelet writes each file with its item's mode and user, else the volume's defaults.
	as := func(p provider, mode *int32, user *int64) provider {
		p.mode, p.user = defaultFileMode, defUser
		if defMode != nil {
			p.mode = *defMode
		}
		if mode != nil {
			p.mode = *mode
		}
		if user != nil {
			p.user = user
		}
		return p
	}
	is := func(p string) bool { return strings.TrimPrefix(path.Clean("/"+p), "/") == f.rel }
	var out []provider
	for _, src := range sources {
		switch {
		case src.ServiceAccountToken != nil:
			if is(src.ServiceAccountToken.Path) {
				out = append(out, as(provider{kind: "serviceAccountToken", audience: src.ServiceAccountToken.Audience}, nil, src.ServiceAccountToken.User))
			}
		case src.ConfigMap != nil:
			if len(src.ConfigMap.Items) == 0 && (src.ConfigMap.Name != rootCAConfigMap || f.rel == "ca.crt") {
				out = append(out, as(provider{kind: "configMap", name: src.ConfigMap.Name, key: keyIfRoot(src.ConfigMap.Name, f.rel)}, nil, nil))
			}
			for _, it := range src.ConfigMap.Items {
				if is(it.Path) {
					out = append(out, as(provider{kind: "configMap", name: src.ConfigMap.Name, key: it.Key}, it.Mode, it.User))
				}
			}
		case src.Secret != nil:
			if len(src.Secret.Items) == 0 {
				out = append(out, as(provider{kind: "secret", name: src.Secret.Name}, nil, nil))
			}
			for _, it := range src.Secret.Items {
				if is(it.Path) {
					out = append(out, as(provider{kind: "secret", name: src.Secret.Name, key: it.Key}, it.Mode, it.User))
				}
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if is(it.Path) {
					field := ""
					if it.FieldRef != nil {
						field = it.FieldRef.FieldPath
					}
					out = append(out, as(provider{kind: "downwardAPI", field: field}, it.Mode, it.User))
				}
			}
		case src.ClusterTrustBundle != nil:
			if is(src.ClusterTrustBundle.Path) {
				out = append(out, provider{kind: "clusterTrustBundle"})
			}
		case src.PodCertificate != nil:
			pc := src.PodCertificate
			if is(pc.CredentialBundlePath) || is(pc.KeyPath) || is(pc.CertificateChainPath) {
				out = append(out, provider{kind: "podCertificate"})
			}
		default:
			out = append(out, provider{kind: "a projection this guard does not know"})
		}
	}
	return out
}

// keyIfRoot is the key the root-CA ConfigMap's only file ca.crt comes from.
func keyIfRoot(name, rel string) string {
	if name == rootCAConfigMap && rel == "ca.crt" {
		return "ca.crt"
	}
	return ""
}

// only returns the single provider of f, or false with what is there when it is not one.
func only(f mountedFile) (provider, string) {
	if f.problem != "" {
		return provider{}, f.problem
	}
	ps := providers(f)
	if len(ps) == 1 {
		return ps[0], ""
	}
	return provider{}, f.describe()
}

// tokenProblem says why f is not the ServiceAccount's token for the API server ("" when it is).
func tokenProblem(f mountedFile) string {
	p, why := only(f)
	switch {
	case why != "":
		return f.target + ": " + why
	case p.kind != "serviceAccountToken":
		return f.target + ": " + f.describe()
	case p.audience != "":
		return fmt.Sprintf("%s: there is a ServiceAccount token for the audience %.64q, which the API server accepts only if it is one of its own audiences (the guard cannot tell)", f.target, p.audience)
	}
	return readProblem(f, p)
}

// defaultFileMode is the mode the API server defaults a volume's files to (0644).
const defaultFileMode int32 = 0o644

// readProblem says why the election's process may be unable to read f, a file of p, as the kubelet
// writes it ("" when any process can): the kubelet writes a projected file with the volume's
// mode, owned by root, by the pod's single runAsUser, or by a user the volume names (its
// defaultUser or the item's user; pkg/volume/projected), and which user the process runs as is
// the image's to say. So the file must be readable by every user, as the plugin's 0644 is; the
// guard judges no owner a volume names. And a file mounted by subPath is copied once: the kubelet
// never writes it again, so a token there expires and a CA there is never renewed.
func readProblem(f mountedFile, p provider) string {
	switch {
	case f.subPath:
		return fmt.Sprintf("%s: it is mounted by subPath, which the kubelet never updates (a token there expires, a CA there is never renewed); mount the volume's directory there", f.target)
	case p.user != nil:
		return fmt.Sprintf("%s: its volume %s makes it owned by user %d, and the guard cannot tell the election's process runs as that user", f.target, quote(f.volume), *p.user)
	case p.mode&0o444 != 0o444:
		return fmt.Sprintf("%s: its volume %s writes it with mode %04o, not readable by every user, and the guard cannot tell which user the election's process runs as (0644, the default, is)", f.target, quote(f.volume), p.mode)
	}
	return ""
}

// caProblem says why f is not the cluster's CA ("" when it is): without it client-go trusts only
// the system roots and cannot verify the cluster's API server; another CA may be another server's.
func caProblem(f mountedFile) string {
	p, why := only(f)
	switch {
	case why != "":
		return f.target + ": " + why
	case p.kind != "configMap" || p.name != rootCAConfigMap || p.key != "ca.crt":
		return f.target + ": " + f.describe() + ", not the cluster's CA (ConfigMap kube-root-ca.crt, key ca.crt)"
	}
	return readProblem(f, p)
}

// describe says what f's volume puts at the path, for messages.
func (f mountedFile) describe() string {
	if f.problem != "" {
		return f.problem
	}
	ps := providers(f)
	kind := volumeKind(f.src)
	switch {
	case len(ps) == 0 && (kind == "projected" || kind == "configMap" || kind == "secret" || kind == "downwardAPI"):
		return fmt.Sprintf("the %s volume %s writes nothing at %s", kind, quote(f.volume), f.rel)
	case len(ps) == 0:
		return fmt.Sprintf("there is the %s volume %s", kind, quote(f.volume))
	case len(ps) > 1:
		return fmt.Sprintf("more than one source of the %s volume %s may write it", kind, quote(f.volume))
	}
	p := ps[0]
	switch p.kind {
	case "configMap":
		return fmt.Sprintf("there is a file of ConfigMap %s (%s volume %s)", quote(p.name), kind, quote(f.volume))
	case "secret":
		return fmt.Sprintf("there is a file of Secret %s (%s volume %s; the guard does not read Secrets, and a token Secret would be a legacy token, not the kubelet's)", quote(p.name), kind, quote(f.volume))
	case "downwardAPI":
		return fmt.Sprintf("there is the downward API field %s (%s volume %s)", quote(p.field), kind, quote(f.volume))
	}
	return fmt.Sprintf("there is a %s source of the %s volume %s", p.kind, kind, quote(f.volume))
}

// volumeKind names a volume source by its field (emptyDir, hostPath, projected, ...).
func volumeKind(src *corev1.VolumeSource) string {
	if src == nil {
		return "unknown"
	}
	v := reflect.ValueOf(*src)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "unknown"
}
