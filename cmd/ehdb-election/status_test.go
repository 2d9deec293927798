package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/noetl/ehdb-election/cmd/ehdb-election/internal/status"
	"github.com/noetl/ehdb-election/internal/testcluster"

	"github.com/noetl/ehdb-election/internal/harness"
)

// The integration side of issue 13's `status`: every test here runs the command against the real
// API server of internal/testcluster.

// statusDoc is the part of the -o json / -o yaml document these tests read.
type statusDoc struct {
	APIVersion    string `json:"apiVersion"`
	Kind          string `json:"kind"`
	Namespace     string `json:"namespace"`
	AllNamespaces bool   `json:"allNamespaces"`
	Clock         struct {
		Source      string   `json:"source"`
		SkewSeconds *float64 `json:"skewSeconds"`
	} `json:"clock"`
	Leases []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Shard     uint32 `json:"shard"`
		Holder    string `json:"holder"`
		Epoch     int32  `json:"epoch"`
		State     string `json:"state"`
	} `json:"leases"`
}

// statesIn is "shard=state" of the document's Leases in namespace ns, in order.
func (d statusDoc) statesIn(ns string) string {
	var s []string
	for _, l := range d.Leases {
		if l.Namespace == ns || d.Namespace == ns { // a one-namespace document's Leases are all in it
			s = append(s, strings.Join([]string{l.Name, l.State}, "="))
		}
	}
	return strings.Join(s, " ")
}

const wantStates = "ehdb-shard-00000000=live ehdb-shard-00000001=expired ehdb-shard-00000002=released"

// -A reads the Leases of every namespace in one list: both test namespaces appear, each with its
// own rows, and the table gains the NAMESPACE column.
func TestStatusAllNamespacesAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	nsA, nsB := c.NewNamespace(t), c.NewNamespace(t)
	createLeases(t, c.Clientset(), nsA)
	createLeases(t, c.Clientset(), nsB)

	code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-A", "-o", "json")
	if code != status.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !doc.AllNamespaces || doc.Namespace != "" {
		t.Errorf("allNamespaces %v, namespace %q", doc.AllNamespaces, doc.Namespace)
	}
	for _, ns := range []string{nsA, nsB} {
		if got := doc.statesIn(ns); got != wantStates {
			t.Errorf("namespace %s: %s, want %s", ns, got, wantStates)
		}
	}

	code, out, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "--all-namespaces")
	if code != status.ExitOK || !strings.HasPrefix(out, "NAMESPACE ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, ns := range []string{nsA, nsB} {
		if n := strings.Count(out, "\n"+ns+" "); n != 3 {
			t.Errorf("%d table rows in namespace %s, want 3:\n%s", n, ns, out)
		}
	}
}

// -o json and -o yaml print one document, parsed back to the same values.
func TestStatusJSONAndYAMLAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	createLeases(t, c.Clientset(), ns)
	var docs []statusDoc
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "-o", format)
		if code != status.ExitOK {
			t.Fatalf("-o %s: exit %d: %s", format, code, errOut)
		}
		var doc statusDoc
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil { // YAML is a superset of JSON
			t.Fatalf("-o %s: %v\n%s", format, err, out)
		}
		if format == "yaml" && json.Valid([]byte(out)) {
			t.Errorf("-o yaml printed JSON")
		}
		docs = append(docs, doc)
	}
	if docs[0].Kind != "ShardLeaseStatus" || docs[0].statesIn(ns) != wantStates || docs[0].Clock.Source != "apiserver" {
		t.Errorf("json document: %+v", docs[0])
	}
	if !reflect.DeepEqual(docs[0].Leases, docs[1].Leases) {
		t.Errorf("json and yaml differ:\n%+v\n%+v", docs[0].Leases, docs[1].Leases)
	}
}

// The real API server's Date header corrects a viewer whose clock is ten minutes ahead: the Lease
// renewed just now (300 s duration) is live, not expired.
func TestStatusServerClockAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	createLeases(t, c.Clientset(), ns)
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		var out, errOut bytes.Buffer
		code := status.Run(context.Background(), []string{"--kubeconfig", c.Kubeconfig, "-n", ns, "-o", "json"}, &out, &errOut,
			status.Options{Clock: clocktesting.NewFakePassiveClock(time.Now().Add(skew))})
		var doc statusDoc
		if err := json.Unmarshal(out.Bytes(), &doc); code != status.ExitOK || err != nil {
			t.Fatalf("skew %v: exit %d, %v\n%s\n%s", skew, code, err, out.String(), errOut.String())
		}
		if got := doc.statesIn(ns); got != wantStates {
			t.Errorf("local clock %v off: %s, want %s", skew, got, wantStates)
		}
		if s := doc.Clock.SkewSeconds; doc.Clock.Source != "apiserver" || s == nil || *s < skew.Seconds()-5 || *s > skew.Seconds()+5 {
			t.Errorf("clock %+v, want skew ≈ %v s", doc.Clock, skew.Seconds())
		}
		if !strings.Contains(errOut.String(), "warning: this machine's clock is 10m0s") {
			t.Errorf("stderr: %s", errOut.String())
		}
		if doc.Clock.SkewSeconds != nil {
			t.Logf("local clock %v: skew measured %.3f s", skew, *doc.Clock.SkewSeconds)
		}
	}
}

// --watch redraws when a Lease changes: a writer takes the released shard 2, and the view shows
// it without being asked again. The watch ends with its context, exit 0.
func TestStatusWatchAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	cs := c.Clientset()
	createLeases(t, cs, ns)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut harness.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--watch"}, &out, &errOut)
	}()
	waitOutput := func(what, want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			select {
			case code := <-done:
				return false, fmt.Errorf("the watch ended, exit %d", code)
			default:
			}
			return strings.Contains(out.String(), want), nil
		})
		if err != nil {
			t.Fatalf("%s: %v: %q not in:\n%s\nstderr:\n%s", what, err, want, out.String(), errOut.String())
		}
	}
	waitOutput("first draw", "released")

	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, "ehdb-shard-00000002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("writer-7#e1b2"), ptr.To(*l.Spec.LeaseTransitions+1)
	l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, &now, ptr.To[int32](300)
	if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitOutput("redraw after the takeover", "writer-7#e1b2")
	cancel()
	if code := <-done; code != status.ExitOK {
		t.Errorf("exit %d after the context ended; stderr:\n%s", code, errOut.String())
	}
	draws := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	last := draws[len(draws)-1]
	t.Logf("%d draws; the last:\n%s", len(draws), last)
	if !strings.Contains(last, "writer-7#e1b2") || strings.Contains(last, "released") {
		t.Errorf("last draw does not show shard 2 taken:\n%s", last)
	}
}

// --as reaches the API server: an impersonated user without RBAC is denied in its own name, and
// --as-group with a group bound to a Role is allowed. The admin kubeconfig (system:masters) may
// impersonate.
func TestStatusImpersonationAgainstAPIServer(t *testing.T) {
	c := testcluster.ForTest(t)
	ns := c.NewNamespace(t)
	cs := c.Clientset()
	ctx := context.Background()
	createLeases(t, cs, ns)

	code, out, errOut := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--as", "alice")
	if code != status.ExitDenied || out != "" {
		t.Errorf("exit %d (want %d), stdout %q", code, status.ExitDenied, out)
	}
	for _, want := range []string{`User "alice" cannot list resource "leases"`, "--user=alice"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	code, _, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-A", "--as", "alice")
	if code != status.ExitDenied || !strings.Contains(errOut, "at the cluster scope") || !strings.Contains(errOut, "kubectl create clusterrolebinding") {
		t.Errorf("-A --as alice: exit %d\n%s", code, errOut)
	}

	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-viewer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-viewers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ehdb-lease-viewers"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding through its informers.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, out, errOut = runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--as", "alice", "--as-group", "ehdb-lease-viewers")
		return code != status.ExitDenied, nil
	})
	if err != nil || code != status.ExitOK || !strings.Contains(out, "live") {
		t.Fatalf("alice in ehdb-lease-viewers: exit %d\n%s\n%s", code, out, errOut)
	}
	// Still alice alone is denied: the grant came with the group, through impersonation.
	if code, _, _ := runCLI(t, "ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--as", "alice"); code != status.ExitDenied {
		t.Errorf("alice without the group: exit %d, want %d", code, status.ExitDenied)
	}

	// The group may list but not watch: --watch stops with the denial, not a silent re-list loop.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wout, werr bytes.Buffer
	code = run(wctx, []string{"ehdb-election", "status", "--kubeconfig", c.Kubeconfig, "-n", ns, "--as", "alice", "--as-group", "ehdb-lease-viewers", "--watch"}, &wout, &werr)
	if wctx.Err() != nil || code != status.ExitDenied || !strings.Contains(werr.String(), `cannot watch resource "leases"`) ||
		!strings.Contains(werr.String(), "--verb=list,watch") {
		t.Errorf("--watch without watch: exit %d (context: %v)\n%s", code, wctx.Err(), werr.String())
	}
	t.Logf("--watch without the watch verb:\n%s", werr.String())
}
