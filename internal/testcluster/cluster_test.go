package testcluster

import (
	"context"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// The smoke test of the foundation: RBAC is real. A ServiceAccount's own token is refused (403)
// before a binding exists and accepted after, through the API server's authorizer, not a fake.
func TestServiceAccountIsForbiddenUntilBound(t *testing.T) {
	c := ForTest(t)
	ctx := context.Background()
	ns := c.NewNamespace(t)
	admin := c.Clientset()

	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ServiceAccountConfig(ctx, ns, "writer")
	if err != nil {
		t.Fatal(err)
	}
	asWriter := kubernetes.NewForConfigOrDie(cfg)

	_, err = asWriter.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("before the binding: want 403 Forbidden, got %v", err)
	}

	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "writer", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC reads bindings from an informer: allow it a moment to see the new one.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := asWriter.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("after the binding the ServiceAccount is still refused: %v", err)
	}
	// Still nothing beyond what the Role grants.
	if _, err := asWriter.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing secrets: want 403 Forbidden, got %v", err)
	}
}

// The controller-manager runs: a StatefulSet produces its Pod object (Pending, there is no kubelet).
func TestStatefulSetProducesPods(t *testing.T) {
	c := ForTest(t)
	ctx := context.Background()
	ns := c.NewNamespace(t)
	labels := map[string]string{"app": "smoke"}
	_, err := c.Clientset().AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Clientset().CoreV1().Pods(ns).Get(ctx, "smoke-0", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the StatefulSet controller never created smoke-0: %v", err)
	}
}

// Stopping a cluster leaves no process and no folder behind, and the API server can be taken
// away and given back (the system suite's "API server gone" scenario relies on it).
func TestStopLeavesNothingBehind(t *testing.T) {
	ForTest(t) // skips or fails exactly like the other tests when there is no control plane
	if os.Getenv("E2E_KUBECONFIG") != "" {
		t.Skip("only meaningful for the local control plane")
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset().CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the API server answered after StopAPIServer")
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	pids := []int{c.etcd.Pid(), c.apiserver.Pid(), c.kcm.Pid()}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s still exists after Stop (err=%v)", c.dir, err)
	}
}

// A webhook registered through a Service is resolved to the Service's endpoints, not its
// ClusterIP, so the API server never dials an address it would route off this machine: with no
// endpoints the call fails at once, naming the cause.
func TestServiceWebhooksNeverDialAClusterIP(t *testing.T) {
	c := ForTest(t)
	if !c.Local() {
		t.Skip("a property of the local control plane's flags")
	}
	ctx := context.Background()
	ns := c.NewNamespace(t)
	cs := c.Clientset()
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}, Selector: map[string]string{"app": "none"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" {
		t.Fatalf("want a ClusterIP service, got %q", svc.Spec.ClusterIP)
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "testcluster-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "guard.testcluster.local",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "guard", Path: ptr.To("/validate")},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})
	// The configuration takes effect asynchronously; once it does, the call must fail on
	// endpoints, and never with a dial error or a timeout towards the ClusterIP.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		return last != nil, nil
	})
	if err != nil {
		t.Fatalf("the webhook never took effect: %v", last)
	}
	if !strings.Contains(last.Error(), "no endpoints available") {
		t.Fatalf("want the call refused for lack of endpoints, got: %v", last)
	}
	if strings.Contains(last.Error(), svc.Spec.ClusterIP) {
		t.Fatalf("the API server dialled the ClusterIP %s: %v", svc.Spec.ClusterIP, last)
	}
}

// A node's components log in with client certificates from the cluster's CA: the API server must
// read exactly the user and groups the certificate names (system:node:<name> in system:nodes is
// what the Node authorizer keys on).
func TestClientKubeconfigAuthenticatesAsTheNamedUser(t *testing.T) {
	c := ForTest(t)
	if !c.Local() {
		t.Skip("client certificates are issued by the local control plane's CA")
	}
	path := t.TempDir() + "/node.kubeconfig"
	if err := c.ClientKubeconfig(path, "system:node:ehdb-test-node", "system:nodes"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := review.Status.UserInfo
	if u.Username != "system:node:ehdb-test-node" || !slices.Contains(u.Groups, "system:nodes") || slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("authenticated as %q in %v, want system:node:ehdb-test-node in system:nodes only", u.Username, u.Groups)
	}
	if _, err := os.Stat(c.CAFile()); err != nil {
		t.Fatalf("CAFile: %v", err)
	}
}
