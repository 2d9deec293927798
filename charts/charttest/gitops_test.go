package charttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/noetl/ehdb-election/internal/chartinstall"
)

// GitOps tools render the chart offline with `helm template` and apply what it prints: Argo CD
// (server-side apply as field manager "argocd-controller") and Flux's kustomize-controller (manager
// "kustomize-controller"), both forcing conflicts. Neither runs Helm's hooks the way Helm does:
// Argo CD maps pre-install/pre-upgrade/post-* onto its own phases, pre-delete onto PreDelete, and
// skips hooks of any other type (gitops-engine pkg/sync/hook); kustomize-controller knows no hooks
// and applies every document. So the chart renders no hook at all offline.

// gitopsManager is the field manager of the test's applies (Argo CD's, with server-side apply).
const gitopsManager = "argocd-controller"

// The annotations that keep an object when a GitOps tool prunes (the object left git) or deletes
// the application: Argo CD's sync options (gitops-engine sync/common: "Prune", "Delete" with value
// "false", a comma-separated list) and Flux's exclusion (kustomize-controller deleteObjects, label or
// annotation, compared case-insensitively).
const (
	argoSyncOptions = "argocd.argoproj.io/sync-options"
	fluxPrune       = "kustomize.toolkit.fluxcd.io/prune"
)

// helmTemplate runs the real `helm template` CLI, as Argo CD's repo server does, and decodes
// everything it prints (hooks included: the CLI prints them unless told --no-hooks).
func helmTemplate(t *testing.T, release, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := chartinstall.HelmCLI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(home, "values.yaml")
	if err := os.WriteFile(valuesFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "template", release, dir, "-n", namespace, "-f", valuesFile, "--kube-version", KubeVersion)
	cmd.Env = chartinstall.HelmEnv(home)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	objs, err := Decode(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("helm template printed nothing")
	}
	return objs
}

// applyOnce server-side applies obj as the GitOps tool would and reports whether the API server
// wrote anything. The apply carries the live resourceVersion as a precondition, so a write that
// happens is ours (a controller's write in between is a conflict, and the step is retried): an
// unchanged resourceVersion means the apply changed nothing, managedFields included.
func applyOnce(ctx context.Context, t *testing.T, objs *objects, obj *unstructured.Unstructured) (wrote bool, before, after *unstructured.Unstructured) {
	t.Helper()
	ri, err := objs.resource(obj)
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 0; attempt < 20; attempt++ {
		live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		desired := obj.DeepCopy()
		if live != nil && err == nil {
			desired.SetResourceVersion(live.GetResourceVersion())
		} else {
			live = nil
		}
		got, err := ri.Apply(ctx, obj.GetName(), desired, metav1.ApplyOptions{FieldManager: gitopsManager, Force: true})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("server-side apply of %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if live == nil {
			return true, nil, got
		}
		return got.GetResourceVersion() != live.GetResourceVersion(), live, got
	}
	t.Fatalf("server-side apply of %s %s: conflicts on every attempt", obj.GetKind(), obj.GetName())
	return false, nil, nil
}

// withNamespace sets the release namespace on namespaced objects that carry none, as the tools do.
func withNamespace(t *testing.T, objs *objects, list []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, 0, len(list))
	for _, o := range list {
		o = o.DeepCopy()
		gvk := o.GroupVersionKind()
		m, err := objs.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("mapping %s: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace && o.GetNamespace() == "" {
			o.SetNamespace(ns)
		}
		out = append(out, o)
	}
	return out
}

// changed names what differs between two versions of an object (metadata.resourceVersion aside).
func changed(before, after *unstructured.Unstructured) string {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
		return c.Object
	}
	b, a := strip(before), strip(after)
	var diffs []string
	for _, k := range []string{"metadata", "spec", "webhooks", "rules", "data", "subjects", "roleRef"} {
		if !reflect.DeepEqual(b[k], a[k]) {
			bm, _ := b[k].(map[string]any)
			am, _ := a[k].(map[string]any)
			if bm != nil && am != nil {
				for f := range am {
					if !reflect.DeepEqual(bm[f], am[f]) {
						diffs = append(diffs, k+"."+f)
					}
				}
				for f := range bm {
					if _, ok := am[f]; !ok {
						diffs = append(diffs, k+"."+f+" (removed)")
					}
				}
			} else {
				diffs = append(diffs, k)
			}
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, ", ")
}

// keptByGitOps reports whether Argo CD and Flux each leave the object on prune and on deletion.
func keptByGitOps(o *unstructured.Unstructured) (argoPrune, argoDelete, flux bool) {
	for _, opt := range strings.Split(o.GetAnnotations()[argoSyncOptions], ",") {
		switch strings.TrimSpace(opt) {
		case "Prune=false":
			argoPrune = true
		case "Delete=false":
			argoDelete = true
		}
	}
	flux = strings.EqualFold(o.GetAnnotations()[fluxPrune], "disabled") || strings.EqualFold(o.GetLabels()[fluxPrune], "disabled")
	return argoPrune, argoDelete, flux
}

// TestGitOpsApplyTwiceChangesNothing (issue 18): for the defaults and every ci scenario, `helm
// template` (the real CLI) applied with server-side apply, twice: the second pass writes nothing.
// The offline render holds no hook (a hook applied as a plain object is a second copy of a release
// object, or an object nobody should run), and the objects Helm keeps on uninstall are exactly
// those Argo CD and Flux keep on prune and deletion.
func TestGitOpsApplyTwiceChangesNothing(t *testing.T) {
	c := newRelease(t, nil).c
	ensureStubCRDs(t, c)
	for name, values := range scenarios(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newRelease(t, nil)
			objs := newObjects(t, r.c)
			rendered := withNamespace(t, objs, helmTemplate(t, r.name, r.ns, r.values(values)), r.ns)
			t.Cleanup(func() { deleteAll(t, objs, rendered) })

			seen := map[string]int{}
			for _, o := range rendered {
				key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
				if seen[key]++; seen[key] == 2 {
					t.Errorf("helm template prints %s twice: every apply writes it twice", key)
				}
				if h, ok := o.GetAnnotations()["helm.sh/hook"]; ok {
					t.Errorf("helm template prints the hook %s (helm.sh/hook: %s): a plain apply creates it as an object", key, h)
				}
				helmKeeps := o.GetAnnotations()[keepPolicy] == "keep"
				argoPrune, argoDelete, flux := keptByGitOps(o)
				if helmKeeps != argoPrune || helmKeeps != argoDelete || helmKeeps != flux {
					t.Errorf("%s: kept by helm uninstall %v, by Argo CD prune %v / delete %v, by Flux %v: the same objects must be kept", key, helmKeeps, argoPrune, argoDelete, flux)
				}
			}

			for _, o := range rendered { // the first sync creates everything
				applyOnce(ctx, t, objs, o)
			}
			// The rotator fills the TLS Secret and the caBundle (self-managed TLS): no sync may undo it.
			var tls map[string][]byte
			var caCert []byte
			if findObject(rendered, "Secret", r.name+"-webhook-tls") != nil && !slices.ContainsFunc(rendered, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Certificate" }) {
				tls, caCert = rotatorFills(t, r)
			}
			// The API server stamps an apply's managedFields entry with the second it happened. A write
			// the fields of the object do not show (an apply that structured-merge-diff counts as a change
			// but that defaulting undoes) changes only that stamp, so it shows only once the second has
			// turned: wait for it, or such a write would pass unseen half the time.
			firstDone := time.Now().Truncate(time.Second)
			waitFor(t, 5*time.Second, "the next second", func(context.Context) (bool, error) {
				return time.Now().Truncate(time.Second).After(firstDone), nil
			})
			for _, o := range rendered { // the second sync must not write
				if wrote, before, after := applyOnce(ctx, t, objs, o); wrote {
					what := "created"
					if before != nil {
						what = changed(before, after)
					}
					t.Errorf("the second apply wrote %s %s (%s)", o.GetKind(), o.GetName(), what)
					if before != nil { // which manager's entry moved
						bj, _ := yaml.Marshal(before.GetManagedFields())
						aj, _ := yaml.Marshal(after.GetManagedFields())
						t.Logf("managedFields before:\n%s\nafter:\n%s", bj, aj)
					}
				}
			}
			if tls != nil {
				checkTLSKept(t, r, "the second apply", tls, caCert, 0)
			}
		})
	}
}

// deleteAll deletes what a test applied (cleanup: errors are logged).
func deleteAll(t *testing.T, objs *objects, list []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, o := range list {
		ri, err := objs.resource(o)
		if err == nil {
			err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// argoDeletionWave models Argo CD's deletion of an application (controller/sort_delete.go,
// FilterObjectsForDeletion): the objects of the highest sync wave (argocd.argoproj.io/sync-wave, else
// helm.sh/hook-weight, else 0) are deleted first, and the next wave only once they are gone.
func argoDeletionWave(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	wave := func(o *unstructured.Unstructured) int {
		for _, k := range []string{"argocd.argoproj.io/sync-wave", "helm.sh/hook-weight"} {
			if v, ok := o.GetAnnotations()[k]; ok {
				if n, err := strconv.Atoi(v); err == nil {
					return n
				}
			}
		}
		return 0
	}
	var first []*unstructured.Unstructured
	top := 0
	for i, o := range objs {
		switch w := wave(o); {
		case i == 0 || w > top:
			top, first = w, []*unstructured.Unstructured{o}
		case w == top:
			first = append(first, o)
		}
	}
	return first
}

// TestGitOpsRemovalInTheDocumentedOrder (issue 18): the render applied as a GitOps tool does, the
// rotator's TLS in place, then removed without Helm's hooks in the README's order: the webhook
// configuration first (Argo CD's first deletion wave) while the Service and Deployment it calls are
// still there; the application's deletion then takes everything but the writer's RBAC and the lease
// guard (the objects Argo CD and Flux keep), which stay until the writers are disarmed; the RBAC,
// then the lease guard last. Nothing rendered is left.
func TestGitOpsRemovalInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRelease(t, nil)
	objs := newObjects(t, r.c)
	rendered := withNamespace(t, objs, helmTemplate(t, r.name, r.ns, r.values(nil)), r.ns)
	t.Cleanup(func() { deleteAll(t, objs, rendered) })
	for _, o := range rendered {
		applyOnce(ctx, t, objs, o)
	}
	data, caCert := rotatorFills(t, r)
	for _, o := range rendered { // a later sync keeps what the rotator wrote
		applyOnce(ctx, t, objs, o)
	}
	checkTLSKept(t, r, "a sync after the rotator's", data, caCert, 5)

	// 1. The webhook configuration, alone in Argo CD's first deletion wave.
	vwc := findObject(rendered, "ValidatingWebhookConfiguration", r.name)
	first := argoDeletionWave(rendered)
	if len(first) != 1 || first[0] != vwc {
		var names []string
		for _, o := range first {
			names = append(names, o.GetKind()+"/"+o.GetName())
		}
		t.Fatalf("Argo CD's first deletion wave is %v, want the webhook configuration alone", names)
	}
	deleteAll(t, objs, []*unstructured.Unstructured{vwc})
	if left := leftovers(ctx, t, objs, []*unstructured.Unstructured{vwc}); len(left) > 0 {
		t.Fatalf("the webhook configuration is still there: %v", left)
	}
	for _, kind := range []string{"Service", "Deployment"} {
		if _, err := objs.get(ctx, findObject(rendered, kind, r.name+"-webhook")); err != nil {
			t.Errorf("the webhook's %s, after the configuration went: %v", kind, err)
		}
	}

	// 2. The application's deletion: what Argo CD and Flux delete (everything but the kept objects).
	var deleted, kept []*unstructured.Unstructured
	for _, o := range rendered {
		if o == vwc {
			continue
		}
		if _, argoDelete, flux := keptByGitOps(o); argoDelete || flux {
			kept = append(kept, o)
		} else {
			deleted = append(deleted, o)
		}
	}
	deleteAll(t, objs, deleted)
	if left := leftovers(ctx, t, objs, deleted); len(left) > 0 {
		t.Errorf("deleting the application left: %v", left)
	}
	var keptNames []string
	for _, o := range kept {
		if _, err := objs.get(ctx, o); err != nil {
			t.Errorf("the kept %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		keptNames = append(keptNames, o.GetKind())
	}
	slices.Sort(keptNames)
	want := []string{"Role", "RoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	if !slices.Equal(keptNames, want) {
		t.Errorf("the application's deletion keeps %v, want the writer's RBAC and the lease guard %v", keptNames, want)
	}

	// 3. Writers disarmed: their RBAC, then 4. the lease guard, last.
	for _, kinds := range [][]string{{"RoleBinding", "Role", "ServiceAccount"}, {"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"}} {
		var step []*unstructured.Unstructured
		for _, o := range kept {
			if slices.Contains(kinds, o.GetKind()) {
				step = append(step, o)
			}
		}
		deleteAll(t, objs, step)
		if left := leftovers(ctx, t, objs, step); len(left) > 0 {
			t.Errorf("deleting %v left: %v", kinds, left)
		}
	}
	if left := leftovers(ctx, t, objs, rendered); len(left) > 0 {
		t.Errorf("after the documented removal: %v", left)
	}
}

// findObject returns the object of that kind and name in list, or nil.
func findObject(list []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range list {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}
