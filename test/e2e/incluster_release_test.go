package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/ociimage"
	"github.com/noetl/ehdb-election/internal/ociregistry"
	"github.com/noetl/ehdb-election/internal/prevrelease"
)

// The releases as users get them, on a node whose kubelet pulls: an OCI registry on the node's
// loopback (E2E_REGISTRY; containerd's hosts.toml names it, plain HTTP), the current release as
// `make release` built it for that registry (E2E_RELEASE_DIR), the previous release rebuilt from
// git history (E2E_PREVIOUS_DIR), and the real helm CLI (E2E_HELM). hack/localnode provides all
// four; elsewhere (kind) these tests skip.
const (
	registryEnv    = "E2E_REGISTRY"
	releaseDirEnv  = "E2E_RELEASE_DIR"
	previousDirEnv = "E2E_PREVIOUS_DIR"
	helmEnv        = "E2E_HELM"
)

// registryRelease is one release pushed to the node's registry.
type registryRelease struct {
	chartVersion string
	webhook      name.Digest // the webhook image by digest, as pushed
	writer       name.Digest // the writer image by digest (the current release only)
}

// nodeRegistry is the suite's registry on the node and what was pushed to it.
type nodeRegistry struct {
	t        *testing.T
	host     string
	helm     chartinstall.CLI
	chartRef string // oci://<host>/charts/ehdb-election
}

// startNodeRegistry serves the CNCF Distribution registry (in memory) where the node's containerd
// pulls from, for the test's duration; it skips when the node has none.
func startNodeRegistry(t *testing.T) *nodeRegistry {
	t.Helper()
	host := os.Getenv(registryEnv)
	if host == "" || os.Getenv(releaseDirEnv) == "" || os.Getenv(previousDirEnv) == "" || os.Getenv(helmEnv) == "" {
		t.Skipf("needs a node that pulls from a registry the test serves (%s, %s, %s, %s: make e2e-node sets them)", registryEnv, releaseDirEnv, previousDirEnv, helmEnv)
	}
	_, portText, err := net.SplitHostPort(host)
	if err != nil {
		t.Fatalf("%s=%q: %v", registryEnv, host, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("%s=%q: %v", registryEnv, host, err)
	}
	reg, err := ociregistry.Start(context.Background(), port, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return &nodeRegistry{t: t, host: reg.Host, helm: chartinstall.CLI{Bin: os.Getenv(helmEnv), Home: t.TempDir()}, chartRef: "oci://" + reg.Host + "/charts/ehdb-election"}
}

// helmRun runs the helm CLI with a deadline; a failure fails the test.
func (r *nodeRegistry) helmRun(args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := r.helm.Run(ctx, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// pushImages pushes every image of an OCI archive to the registry it is named for (this one) and
// returns each reference by digest, keyed by the image's repository suffix ("-webhook", "-writer").
func (r *nodeRegistry) pushImages(archive string) map[string]name.Digest {
	r.t.Helper()
	imgs, closeArchive, err := ociimage.ReadArchive(archive)
	if err != nil {
		r.t.Fatal(err)
	}
	defer closeArchive()
	out := map[string]name.Digest{}
	for _, n := range imgs {
		if !strings.HasPrefix(n.Ref, r.host+"/") {
			r.t.Fatalf("%s names %s, not an image of the node's registry %s", archive, n.Ref, r.host)
		}
		d, err := ociimage.Push(context.Background(), n)
		if err != nil {
			r.t.Fatal(err)
		}
		repo := d.Context().RepositoryStr()
		out[repo[strings.LastIndex(repo, "-"):]] = d
	}
	return out
}

// pushCurrent pushes the current release: its images, then its chart package with `helm push`.
func (r *nodeRegistry) pushCurrent() registryRelease {
	r.t.Helper()
	dir := os.Getenv(releaseDirEnv)
	digests := r.pushImages(filepath.Join(dir, "images.tar"))
	tgzs, _ := filepath.Glob(filepath.Join(dir, "ehdb-election-*.tgz"))
	if len(tgzs) != 1 {
		r.t.Fatalf("want one chart package in %s, found %v", dir, tgzs)
	}
	r.helmRun("push", tgzs[0], "oci://"+r.host+"/charts", "--plain-http")
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tgzs[0]), "ehdb-election-"), ".tgz")
	return registryRelease{chartVersion: version, webhook: digests["-webhook"], writer: digests["-writer"]}
}

// pushPrevious pushes the previous release: its webhook image, and its chart packaged by the helm
// CLI from the tree of its commit (it was never packaged) and pushed like a release.
func (r *nodeRegistry) pushPrevious() registryRelease {
	r.t.Helper()
	dir := os.Getenv(previousDirEnv)
	digests := r.pushImages(filepath.Join(dir, "images.tar"))
	out := r.t.TempDir()
	r.helmRun("package", filepath.Join(dir, "chart"), "-d", out)
	tgz := filepath.Join(out, "ehdb-election-"+prevrelease.Version+".tgz")
	r.helmRun("push", tgz, "oci://"+r.host+"/charts", "--plain-http")
	return registryRelease{chartVersion: prevrelease.Version, webhook: digests["-webhook"]}
}

// checkServes checks the registry serves the reference by digest (what the kubelet will pull).
func (r *nodeRegistry) checkServes(d name.Digest) {
	r.t.Helper()
	ref, err := name.NewDigest(d.String(), name.Insecure)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := remote.Head(ref, remote.WithContext(context.Background())); err != nil {
		r.t.Fatalf("the registry does not serve %s: %v", d, err)
	}
}

// pulledByDigest checks that every running container of the Pods runs the image named by digest:
// the kubelet's container status imageID is <repository>@<digest> of what was pushed (containerd
// reports the repo digest it pulled). An image imported by hand would carry no such repo digest.
func pulledByDigest(pods []corev1.Pod, container string, want name.Digest) error {
	if len(pods) == 0 {
		return fmt.Errorf("no Pods to check for %s", want)
	}
	for _, p := range pods {
		found := false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != container {
				continue
			}
			found = true
			if cs.State.Running == nil {
				return fmt.Errorf("%s/%s is not running: %s", p.Name, cs.Name, podWhy(&p))
			}
			if cs.ImageID != want.String() {
				return fmt.Errorf("%s/%s runs imageID %q (image %q), want %q", p.Name, cs.Name, cs.ImageID, cs.Image, want)
			}
		}
		if !found {
			return fmt.Errorf("%s has no container %s", p.Name, container)
		}
	}
	return nil
}

// webhookRunsImage waits until the webhook Deployment is rolled out (every replica updated and
// Ready, no old Pod left) and every webhook Pod runs want, pulled by the kubelet.
func (s *icSystem) webhookRunsImage(timeout time.Duration, want name.Digest) {
	s.t.Helper()
	s.waitRolledOut(timeout, 2)
	ctx := context.Background()
	eventually(s.t, timeout, "every webhook Pod runs "+want.String(), func() error {
		pods, err := s.webhookPods(ctx)
		if err != nil {
			return err
		}
		live := pods[:0]
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		return pulledByDigest(live, "webhook", want)
	})
}

// registryWriter is the reference writer with the release's writer image by digest, pulled by
// the kubelet (IfNotPresent: a digest names one content, so present means the same bytes).
func (s *icSystem) registryWriter(replicas int32, fencing string, image name.Digest) *appsv1.StatefulSet {
	sts := s.icWriter(replicas, fencing)
	c := &sts.Spec.Template.Spec.Containers[0]
	c.Image = image.String()
	c.ImagePullPolicy = corev1.PullIfNotPresent
	return sts
}

// TestInClusterReleaseFromTheRegistry is issue 18's release as a platform team gets it on a node
// that pulls: the current release's images pushed to the node's registry, its chart pushed with
// `helm push` and installed from oci:// with no image values, so the webhook runs the chart's
// default image pinned by digest; a writer StatefulSet names the release's writer image by digest.
// The kubelet pulls both (the node has imported neither), and each container's imageID is the
// pushed digest.
func TestInClusterReleaseFromTheRegistry(t *testing.T) {
	s := newICSystem(t)
	reg := startNodeRegistry(t)
	ctx := context.Background()
	cur := reg.pushCurrent()
	reg.checkServes(cur.webhook)
	reg.checkServes(cur.writer)
	t.Logf("pushed chart %s; webhook %s; writer %s", cur.chartVersion, cur.webhook, cur.writer)

	s.helmInstall(reg, cur.chartVersion)
	s.webhookRunsImage(4*time.Minute, cur.webhook)

	sts := s.registryWriter(1, "off", cur.writer)
	if _, err := s.cs.AppsV1().StatefulSets(s.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := s.waitHolder(3*time.Minute, "")
	pod, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, h.pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pulledByDigest([]corev1.Pod{*pod}, sts.Spec.Template.Spec.Containers[0].Name, cur.writer); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s holds epoch %d running %s", h.pod, h.epoch, pod.Status.ContainerStatuses[0].ImageID)
	s.deleteWriters()
}

// helmInstall installs the release from the registry with the helm CLI (values as given), and
// uninstalls it at the end, removing the lease guard the chart keeps on uninstall.
func (s *icSystem) helmInstall(reg *nodeRegistry, version string, set ...string) {
	s.t.Helper()
	args := []string{"install", release, reg.chartRef, "--version", version, "--plain-http", "-n", s.ns, "--kubeconfig", s.c.Kubeconfig}
	for _, kv := range set {
		args = append(args, "--set", kv)
	}
	s.t.Logf("helm %s", strings.Join(args, " "))
	reg.helmRun(args...)
	s.t.Cleanup(func() {
		if s.t.Failed() {
			s.dumpPods()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := reg.helm.Run(ctx, "uninstall", release, "-n", s.ns, "--kubeconfig", s.c.Kubeconfig, "--wait"); err != nil {
			s.t.Errorf("helm uninstall: %v: %s", err, out)
		}
		guard := release + "-lease-guard." + s.ns
		_ = s.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, guard, metav1.DeleteOptions{})
		_ = s.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, guard, metav1.DeleteOptions{})
	})
}

// deleteWriters deletes the writer StatefulSet and waits for its Pods to go (each releases its
// Lease on SIGTERM), so the uninstall that follows never runs under armed writers.
func (s *icSystem) deleteWriters() {
	s.t.Helper()
	ctx := context.Background()
	if err := s.cs.AppsV1().StatefulSets(s.ns).Delete(ctx, writerName, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, 2*time.Minute, "every writer Pod is gone", func() error {
		pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + writerName})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d writer Pods left", len(pods.Items))
		}
		return nil
	})
}

// upgradeShards is the writer StatefulSet's size in the upgrade: one shard per ordinal.
const upgradeShards = 2

// TestInClusterUpgradeFromThePreviousReleaseUnderLoad is issue 18's upgrade under load: the
// previous release (0.1.0, rebuilt from its commit, its webhook image pulled from the node's
// registry) installed from oci:// with only a mirror set (webhook.image.repository), armed writers
// minting on every shard, then the current release's chart from oci:// —
//
//	rev 2 helm upgrade                  (the previous values carried: the mirror; the image by digest)
//	rev 3 helm rollback 1               (back to the previous release)
//	rev 4 helm upgrade --reuse-values   (from the previous release)
//	rev 5 helm rollback 1
//	rev 6 helm upgrade                  (from the previous release once more)
//	rev 7 helm upgrade --force          (every object replaced)
//
// (A --force upgrade straight from the previous release empties the caBundle of the entries it
// had until the rotator puts it back, the price of keeping the rollback after it whole: README
// "Limits", charts/charttest TestRollbackToThePreviousChartKeepsTheTLS.)
//
// while a load runs throughout: each writer's /metrics scraped continuously (token_valid must stay
// 1, at the same epoch: no drop, no re-acquisition), and a client making admission reviews
// continuously through every webhook the release registers — a correct armed change (must be
// admitted), a wrong one (must be refused by the guard, not fail), an armed Pod with the default
// ServiceAccount (the Pods webhook fails open: a call that failed would admit it), a ConfigMap
// change (fails closed). After, the API server's own admission metrics must show no failed call
// to any webhook of the release: no calling_webhook_error rejection, no fail-open, no request
// answered other than 200.
func TestInClusterUpgradeFromThePreviousReleaseUnderLoad(t *testing.T) {
	s := newICSystem(t)
	reg := startNodeRegistry(t)
	ctx := context.Background()
	step := func(name string) { t.Logf("=== %s", name) }
	start := time.Now()

	step("push both releases; install the previous one from oci:// with a mirror")
	prev := reg.pushPrevious()
	cur := reg.pushCurrent()
	mirror := "webhook.image.repository=" + prev.webhook.Context().String()
	s.helmInstall(reg, prev.chartVersion, mirror)
	// The previous release names its image by tag (it pinned no digest); the tag was pushed with it.
	s.webhookRunsImage(4*time.Minute, prev.webhook)

	step("armed writers on every shard, from the release's writer image by digest")
	sts := s.registryWriter(upgradeShards, "off", cur.writer)
	if _, err := s.cs.AppsV1().StatefulSets(s.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitUpgradeShards(3*time.Minute, nil)
	if _, err := s.updateWriter(func(x *appsv1.StatefulSet) { setContainerEnv(x, "NOETL_EHDB_FENCING", "enforce") }); err != nil {
		t.Fatalf("arming once minting is live: refused: %v", err)
	}
	armed := s.waitUpgradeShards(3*time.Minute, func(x *appsv1.StatefulSet) error {
		if envOf(x, "NOETL_EHDB_FENCING") != "enforce" {
			return fmt.Errorf("not armed yet")
		}
		return nil
	})
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + writerName})
	if err != nil {
		t.Fatal(err)
	}
	if err := pulledByDigest(pods.Items, sts.Spec.Template.Spec.Containers[0].Name, cur.writer); err != nil {
		t.Fatal(err)
	}
	t.Logf("armed writers: %v (set up in %.1fs)", armed, time.Since(start).Seconds())

	step("the load: writers scraped and admission reviewed continuously")
	before := s.admissionCalls(ctx)
	load := s.startLoad(armed)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			load.stop(t)
		}
	})

	helm := func(args ...string) {
		t.Helper()
		began := time.Now()
		reg.helmRun(append(args, "-n", s.ns, "--kubeconfig", s.c.Kubeconfig)...)
		t.Logf("helm %s: %.1fs", strings.Join(args, " "), time.Since(began).Seconds())
	}
	upgrade := func(flags ...string) {
		t.Helper()
		helm(append([]string{"upgrade", release, reg.chartRef, "--version", cur.chartVersion, "--plain-http"}, flags...)...)
	}
	// A --reuse-values upgrade renders with the previous chart's defaults (Helm's rule), where the
	// tag defaulted to the appVersion and no digest was pinned: the current release by tag.
	byTag := cur.webhook
	for _, rev := range []struct {
		what string
		run  func()
		want name.Digest
	}{
		{"rev 2: helm upgrade to the current release", func() { upgrade() }, cur.webhook},
		{"rev 3: helm rollback to the previous release", func() { helm("rollback", release, "1") }, prev.webhook},
		{"rev 4: helm upgrade --reuse-values from the previous release", func() { upgrade("--reuse-values") }, byTag},
		{"rev 5: helm rollback to the previous release", func() { helm("rollback", release, "1") }, prev.webhook},
		{"rev 6: helm upgrade from the previous release", func() { upgrade() }, cur.webhook},
		{"rev 7: helm upgrade --force", func() { upgrade("--force") }, cur.webhook},
	} {
		step(rev.what)
		began := time.Now()
		rev.run()
		s.webhookRunsImage(3*time.Minute, rev.want)
		load.check(t, rev.what)
		t.Logf("%s: rolled out in %.1fs", rev.what, time.Since(began).Seconds())
	}

	step("the load's verdict and the API server's admission metrics")
	summary, stopped := load.stop(t), true
	after := s.admissionCalls(ctx)
	t.Logf("load: %s", summary)
	if failed := after.failedSince(before); len(failed) > 0 {
		t.Errorf("the API server counted failed calls to the release's webhooks during the upgrades:\n  %s", strings.Join(failed, "\n  "))
	}
	t.Logf("webhook calls the API server made during the upgrades: %v", after.callsSince(before))
	for shard, h := range armed {
		got, err := s.shardHeld(ctx, shard)
		if err != nil || got.identity != h.identity || got.epoch != h.epoch {
			t.Errorf("shard %d: held by %v (err %v), was %v: a writer lost or changed its Lease during the upgrades", shard, got, err, h)
		}
	}
	s.deleteWriters()
	t.Logf("total %.1fs", time.Since(start).Seconds())
}

func envOf(sts *appsv1.StatefulSet, key string) string {
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == key {
			return e.Value
		}
	}
	return ""
}

// waitUpgradeShards waits until the writer StatefulSet is rolled out (cond holding on it, when
// given) and each of its shards is held, valid, by its Pod's process.
func (s *icSystem) waitUpgradeShards(timeout time.Duration, cond func(*appsv1.StatefulSet) error) []shardHolding {
	s.t.Helper()
	ctx := context.Background()
	var got []shardHolding
	eventually(s.t, timeout, fmt.Sprintf("%d writer Pods rolled out, Ready, each holding its shard", upgradeShards), func() error {
		st, err := s.cs.AppsV1().StatefulSets(s.ns).Get(ctx, writerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cond != nil {
			if err := cond(st); err != nil {
				return err
			}
		}
		if x := st.Status; x.ObservedGeneration < st.Generation || x.UpdatedReplicas != upgradeShards || x.ReadyReplicas != upgradeShards || x.CurrentRevision != x.UpdateRevision {
			return fmt.Errorf("generation %d observed %d: updated %d ready %d, revision %s → %s",
				st.Generation, x.ObservedGeneration, x.UpdatedReplicas, x.ReadyReplicas, x.CurrentRevision, x.UpdateRevision)
		}
		got = got[:0]
		for shard := range upgradeShards {
			h, err := s.shardHeld(ctx, shard)
			if err != nil {
				return err
			}
			got = append(got, h)
		}
		return nil
	})
	return got
}
