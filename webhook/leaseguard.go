package webhook

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file answers "will the chart's lease guard let the writer's account write its Leases?".
// The lease guard (a ValidatingAdmissionPolicy the chart renders, one per namespace) admits
// writes of ehdb-shard-* Leases only from the accounts it was rendered with: the chart's writer
// account, those the writer RoleBindings bound when Helm rendered, and break-glass principals.
// RBAC may grant the verbs to any account (checkAccess), so an armed writer running as another
// one bound to the Role by hand passed the access check and was then refused at its first Lease
// write: it never minted (the ninth red team). Its admitted principals are read off the live
// policy, not predicted from the chart's values.

// LeaseGuardLabel marks the chart's lease guard policies and their bindings.
const LeaseGuardLabel = "app.kubernetes.io/component=writer-election"

// LeaseGuardFact is the lease guard that binds one namespace, as the cluster holds it.
type LeaseGuardFact struct {
	// Name is the policy's; "" when no lease guard denies in the namespace.
	Name string
	// Users and Groups are the principals it admits Lease writes from.
	Users, Groups []string
	// Also are the other lease guards that bind the namespace: the API server requires every one
	// to admit a write (the chart refuses to render a second, but one may be left behind).
	Also []LeaseGuardFact
	// Unread says why the webhook may not read the lease guards at all: its role predates the
	// check (an older chart's, after a rollback). The account is then not checked against them,
	// with a warning: refusing every armed writer would break the rollback, and what goes
	// unchecked is what the writer's readiness catches (it never mints).
	Unread string
	Err    error
}

// LeaseGuardOf is the lease guard of namespace among the labelled policies and bindings: each
// policy a binding with the Deny action binds to that namespace (by the chart's namespace
// selector), with the principals its variables list. A binding whose policy is missing, or whose
// variables are not as the chart renders them, is an error: what it admits cannot be told.
func LeaseGuardOf(namespace string, policies []admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) LeaseGuardFact {
	var out LeaseGuardFact
	for _, g := range leaseGuardsOf(namespace, policies, bindings) {
		switch {
		case g.Err != nil:
			return g
		case out.Name == "":
			out = g
		default:
			out.Also = append(out.Also, g)
		}
	}
	return out
}

func leaseGuardsOf(namespace string, policies []admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) []LeaseGuardFact {
	var out []LeaseGuardFact
	for _, b := range bindings {
		if !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) || b.Spec.MatchResources == nil ||
			b.Spec.MatchResources.NamespaceSelector == nil || b.Spec.MatchResources.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != namespace {
			continue
		}
		i := slices.IndexFunc(policies, func(p admissionregistrationv1.ValidatingAdmissionPolicy) bool { return p.Name == b.Spec.PolicyName })
		if i < 0 {
			return []LeaseGuardFact{{Name: b.Spec.PolicyName, Err: fmt.Errorf("lease guard binding %s names policy %s, which was not found", b.Name, b.Spec.PolicyName)}}
		}
		fact := LeaseGuardFact{Name: b.Spec.PolicyName}
		for _, v := range policies[i].Spec.Variables {
			var err error
			switch v.Name {
			case "writer":
				var u string
				if u, err = celString(v.Expression); err == nil {
					fact.Users = append(fact.Users, u)
				}
			case "boundWriters", "breakGlassUsers":
				var us []string
				if err = json.Unmarshal([]byte(v.Expression), &us); err == nil {
					fact.Users = append(fact.Users, us...)
				}
			case "breakGlassGroups":
				err = json.Unmarshal([]byte(v.Expression), &fact.Groups)
			}
			if err != nil {
				return []LeaseGuardFact{{Name: fact.Name, Err: fmt.Errorf("lease guard %s: variable %s is not as the chart renders it: %w", fact.Name, v.Name, err)}}
			}
		}
		if len(fact.Users) == 0 {
			return []LeaseGuardFact{{Name: fact.Name, Err: fmt.Errorf("lease guard %s names no writer", fact.Name)}}
		}
		out = append(out, fact)
	}
	return out
}

// celString decodes a CEL string literal in single quotes, as the chart renders the writer.
func celString(expr string) (string, error) {
	s := strings.TrimSpace(expr)
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' || strings.ContainsAny(s[1:len(s)-1], `'\`) {
		return "", fmt.Errorf("%q is not a plain single-quoted string", expr)
	}
	return s[1 : len(s)-1], nil
}

// admits reports whether g lets ServiceAccount sa write Leases, authenticated with its token.
func (g LeaseGuardFact) admits(sa types.NamespacedName) bool {
	if slices.Contains(g.Users, serviceAccountUser(sa)) {
		return true
	}
	for _, group := range ServiceAccountGroups(sa.Namespace) {
		if slices.Contains(g.Groups, group) {
			return true
		}
	}
	return false
}

// checkLeaseGuard requires the lease guard of ns, if any, to admit the writer's account.
func (d *Decision) checkLeaseGuard(f *Facts, sa types.NamespacedName, ns string) {
	g, ok := f.LeaseGuards[ns]
	switch {
	case !ok:
		d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not tell whether a lease guard in %s admits ServiceAccount %s (%s).", ns, sa, errNotLookedUp), "retry.")
	case g.Unread != "":
		d.warn(truncate(fmt.Sprintf("ServiceAccount %s was not checked against the lease guard of %s: %s.", sa, ns, g.Unread), 240))
	case g.Err != nil:
		d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not tell whether the lease guard of %s admits ServiceAccount %s: %v.", ns, sa, g.Err),
			"retry; if it persists, check that the webhook may list validatingadmissionpolicies and their bindings.")
	case g.Name != "":
		for _, o := range g.Also {
			if !o.admits(sa) {
				g = o
			}
		}
		if g.admits(sa) {
			return
		}
		d.unmet(ReasonLeaseGuard,
			fmt.Sprintf("the lease guard %s lets only %s write ehdb-shard-* Leases in %s, not ServiceAccount %s: its election could never write its Lease.", g.Name, listed(g.Users), ns, sa),
			fmt.Sprintf("run the writer as %s, or bind %s with the chart (a writer RoleBinding labelled app.kubernetes.io/component=writer-election) and run helm upgrade --reuse-values so the lease guard admits it, before arming.", listed(g.Users), sa))
	}
}
