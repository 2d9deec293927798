package charttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

// isolationLabel scopes a test release's webhook to the namespaces the test labels for it. The
// local cluster has no Service network: a webhook call through a Service would go nowhere (or, worse,
// off the machine). With this selector no object reaches a test's webhook unless the test means it
// to, and parallel releases never see each other's objects.
const isolationLabel = "ehdb-test.noetl.io/webhook"

// testRelease is one installed release of the chart in its own namespace.
type testRelease struct {
	c    *testcluster.Cluster
	cs   kubernetes.Interface
	ns   string
	name string
	helm *helmClient
	// rendered is what the last install or upgrade applied.
	rendered *Rendered
}

// newRelease creates a namespace (labelled as given) and a Helm client for it. The release name
// contains the chart name, so the chart's names are "<release>", "<release>-webhook", ...
func newRelease(t *testing.T, nsLabels map[string]string) *testRelease {
	t.Helper()
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	if len(nsLabels) > 0 {
		labelNamespace(t, c.Clientset(), ns, nsLabels)
	}
	h, err := newHelmClient(c.Kubeconfig, ns, t.TempDir(), func(format string, args ...any) {
		if testing.Verbose() {
			t.Logf("helm: "+format, args...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return &testRelease{c: c, cs: c.Clientset(), ns: ns, name: Name + "-" + ns[strings.LastIndex(ns, "-")+1:], helm: h}
}

func labelNamespace(t *testing.T, cs kubernetes.Interface, ns string, labels map[string]string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range labels {
			if v == "" {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = v
			}
		}
		_, err = cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("labelling namespace %s: %v", ns, err)
	}
}

// values returns the test's values: overrides merged over base, with the webhook scoped to
// namespaces labelled for this release (wherever they are).
func (r *testRelease) values(base map[string]any, overrides ...map[string]any) map[string]any {
	v := copyValues(base)
	for _, o := range overrides {
		mergeValues(v, copyValues(o))
	}
	// The isolation label does the scoping here, so the guard looks beyond the release namespace.
	mergeValues(v, map[string]any{"webhook": map[string]any{
		"guardedNamespaces": []any{"*"},
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{isolationLabel: r.name}},
	}})
	return v
}

func mergeValues(dst, src map[string]any) {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
}

// install installs the release and registers its uninstall (if the test has not uninstalled it).
func (r *testRelease) install(t *testing.T, values map[string]any) {
	t.Helper()
	rendered, err := r.helm.Install(context.Background(), r.name, values)
	if err != nil {
		t.Fatal(err)
	}
	r.rendered = rendered
	t.Cleanup(func() {
		if err := r.helm.Uninstall(r.name, false); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Logf("cleanup: %v", err)
		}
		r.removeKeptLeaseGuard(t)
	})
}

// removeKeptLeaseGuard deletes the release's lease guard, which `helm uninstall` keeps with the
// writer's RBAC: it is cluster-scoped, so the test namespace's deletion would not take it.
func (r *testRelease) removeKeptLeaseGuard(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.name + ",app.kubernetes.io/component=writer-election"}
	adm := r.cs.AdmissionregistrationV1()
	if err := adm.ValidatingAdmissionPolicyBindings().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Logf("cleanup: lease guard bindings: %v", err)
	}
	if err := adm.ValidatingAdmissionPolicies().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Logf("cleanup: lease guard policies: %v", err)
	}
}

// objects gives dynamic access to any rendered object (built-in or CRD).
type objects struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

func newObjects(t *testing.T, c *testcluster.Cluster) *objects {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Clientset().Discovery()))
	return &objects{dyn: dyn, mapper: mapper}
}

func (o *objects) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := o.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return o.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return o.dyn.Resource(m.Resource), nil
}

func (o *objects) get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := o.resource(obj)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// stubCRDs installs the stand-in cert-manager and prometheus-operator CRDs once per test binary.
// On an external cluster that already has the real ones, those are used and left alone.
var stubCRDs struct {
	sync.Once
	err error
}

func ensureStubCRDs(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	stubCRDs.Do(func() { stubCRDs.err = installStubCRDs(c) })
	if stubCRDs.err != nil {
		t.Fatal(stubCRDs.err)
	}
}

func installStubCRDs(c *testcluster.Cluster) error {
	data, err := os.ReadFile(filepath.Join("testdata", "crds.yaml"))
	if err != nil {
		return err
	}
	crds, err := Decode(string(data))
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, crd := range crds {
		if _, err := dyn.Resource(gvr).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := dyn.Resource(gvr).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				m := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s: %w", crd.GetName(), err)
		}
	}
	return nil
}

// TestInstallEveryScenario: `helm install` of the defaults and of every ci scenario into a real API
// server; every rendered object is accepted (the install fails otherwise) and is there afterwards;
// `helm uninstall` then leaves none of them, nor the release's record.
func TestInstallEveryScenario(t *testing.T) {
	c := testcluster.ForTest(t)
	ensureStubCRDs(t, c)
	objs := newObjects(t, c)
	for name, values := range scenarios(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := newRelease(t, nil)
			r.install(t, r.values(values))
			if len(r.rendered.Objects) == 0 {
				t.Fatal("installed nothing")
			}
			for _, o := range r.rendered.Objects {
				if _, err := objs.get(ctx, o); err != nil {
					t.Errorf("%s %s/%s after install: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}

			if err := r.helm.Uninstall(r.name, false); err != nil {
				t.Fatal(err)
			}
			gone, kept := splitKept(append(r.rendered.Objects, r.rendered.Hooks...))
			left := leftovers(ctx, t, objs, gone)
			if len(left) > 0 {
				t.Errorf("helm uninstall left: %v", left)
			}
			// The writer's account, Role and RoleBinding stay (helm.sh/resource-policy: keep).
			for _, o := range kept {
				if _, err := objs.get(ctx, o); err != nil {
					t.Errorf("helm uninstall removed the kept %s/%s: %v", o.GetKind(), o.GetName(), err)
				}
			}
			secrets, err := r.cs.CoreV1().Secrets(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + r.name})
			if err != nil {
				t.Fatal(err)
			}
			if len(secrets.Items) != 0 {
				t.Errorf("helm uninstall left %d release records", len(secrets.Items))
			}
		})
	}
}

// leftovers lists the objects that still exist, waiting (bounded) for those being deleted in the
// background (a Deployment's deletion completes after its dependents are collected).
func leftovers(ctx context.Context, t *testing.T, objs *objects, list []*unstructured.Unstructured) []string {
	t.Helper()
	var left []string
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, o := range list {
			_, err := objs.get(ctx, o)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				left = append(left, fmt.Sprintf("%s/%s (%v)", o.GetKind(), o.GetName(), err))
			default:
				left = append(left, o.GetKind()+"/"+o.GetName())
			}
		}
		return len(left) == 0, nil
	})
	return left
}

// waitFor polls cond every 100ms for up to timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
