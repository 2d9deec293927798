{{/*
The chart name, or nameOverride.
*/}}
{{- define "ehdb-election.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: fullnameOverride, else the release name when it already contains the chart name
(so `helm install ehdb-election` gives the names the webhook's flag defaults expect), else
<release>-<chart>. Truncated to 50 so that suffixes such as "-webhook-tls" keep names under 63.
*/}}
{{- define "ehdb-election.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ehdb-election.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels on every object.
*/}}
{{- define "ehdb-election.labels" -}}
helm.sh/chart: {{ include "ehdb-election.chart" . }}
app.kubernetes.io/name: {{ include "ehdb-election.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ehdb-election
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the writer's RBAC objects and of the lease guard.
*/}}
{{- define "ehdb-election.writer.labels" -}}
{{ include "ehdb-election.labels" . }}
app.kubernetes.io/component: writer-election
{{- end }}

{{/*
Selector labels of the webhook pods: stable across upgrades (Deployment selectors are immutable).
*/}}
{{- define "ehdb-election.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ehdb-election.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "ehdb-election.webhook.labels" -}}
{{ include "ehdb-election.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
Names. The webhook finds its Service, Secret and webhook configuration by these names (flags), and
its RBAC names the Secret and the configuration with resourceNames, so all three come from here.
*/}}
{{- define "ehdb-election.webhook.fullname" -}}
{{- printf "%s-webhook" (include "ehdb-election.fullname" .) }}
{{- end }}

{{- define "ehdb-election.webhook.serviceName" -}}
{{- include "ehdb-election.webhook.fullname" . }}
{{- end }}

{{- define "ehdb-election.webhook.secretName" -}}
{{- printf "%s-tls" (include "ehdb-election.webhook.fullname" .) }}
{{- end }}

{{- define "ehdb-election.webhook.configName" -}}
{{- include "ehdb-election.fullname" . }}
{{- end }}

{{- define "ehdb-election.webhook.certificateName" -}}
{{- include "ehdb-election.webhook.fullname" . }}
{{- end }}

{{/*
cert-manager mode with the chart's own CA: the CA's Certificate, Secret and CA Issuer share this name.
*/}}
{{- define "ehdb-election.webhook.caName" -}}
{{- printf "%s-ca" (include "ehdb-election.webhook.fullname" .) }}
{{- end }}

{{/*
The Certificate cainjector takes the caBundle from: the chart's CA when the chart issues (so a renewal
of the serving certificate leaves the caBundle alone), else the serving certificate, whose Secret's
ca.crt is the external issuer's CA.
*/}}
{{- define "ehdb-election.webhook.caInjectFrom" -}}
{{- if .Values.certManager.issuerRef }}
{{- printf "%s/%s" .Release.Namespace (include "ehdb-election.webhook.certificateName" .) }}
{{- else }}
{{- printf "%s/%s" .Release.Namespace (include "ehdb-election.webhook.caName" .) }}
{{- end }}
{{- end }}

{{- define "ehdb-election.webhook.serviceAccountName" -}}
{{- $name := .Values.webhook.serviceAccount.name | default "" }}
{{- if eq $name "default" }}
{{- fail "webhook.serviceAccount.name must not be \"default\": the webhook's ClusterRole would go to every pod of the namespace that names no account" }}
{{- end }}
{{- if .Values.webhook.serviceAccount.create }}
{{- default (include "ehdb-election.webhook.fullname" .) $name }}
{{- else if $name }}
{{- $name }}
{{- else }}
{{- fail "webhook.serviceAccount.create=false needs webhook.serviceAccount.name (an existing, dedicated account)" }}
{{- end }}
{{- end }}

{{/*
Cluster-scoped objects that belong to one namespace's writers carry the namespace in their name, so
a second release for another writer namespace (webhook.enabled=false) does not collide.
*/}}
{{- define "ehdb-election.leaseGuard.name" -}}
{{- printf "%s-lease-guard.%s" (include "ehdb-election.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" | trimSuffix "." }}
{{- end }}

{{/*
The writer's Role and RoleBinding: named from the release, so a second release in one namespace does
not collide. The release named like the chart (`helm install ehdb-election`) keeps the specification's
name, ehdb-shard-election: its upgrades find the Role they kept, and the names tools look for.
*/}}
{{- define "ehdb-election.writer.roleName" -}}
{{- $full := include "ehdb-election.fullname" . }}
{{- if eq $full .Chart.Name }}ehdb-shard-election{{ else }}{{ printf "%s-shard-election" $full }}{{ end }}
{{- end }}

{{/*
The writer's ServiceAccount name. The schema refuses "" (not a DNS name); "default" is refused here,
where the message can say why (a schema can only say "'not' failed"), schema or no schema.
*/}}
{{- define "ehdb-election.writer.serviceAccountName" -}}
{{- $name := .Values.writer.serviceAccount.name | default "" }}
{{- if or (eq $name "") (eq $name "default") }}
{{- fail "writer.serviceAccount.name must name a dedicated ServiceAccount, not \"default\" or empty: a binding to default grants lease writes to every pod in the namespace that names no account" }}
{{- end }}
{{- $name }}
{{- end }}

{{/*
The webhook's image. global.imageRegistry (the convention of charts that mirror images) replaces the
registry of webhook.image.repository: its first path element when that names a host (has a "." or
a ":", or is "localhost"), else it is prefixed.
*/}}
{{- define "ehdb-election.webhook.image" -}}
{{- $img := .Values.webhook.image }}
{{- $repo := $img.repository }}
{{- with (.Values.global | default dict).imageRegistry }}
{{- $parts := splitList "/" $repo }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repo = join "/" (rest $parts) }}
{{- end }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- $ref := printf "%s:%s" $repo (default .Chart.AppVersion $img.tag) }}
{{- if $img.digest }}
{{- $ref = printf "%s@%s" $ref $img.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
CEL, for matchConditions: true when a pod spec (at the path given as the argument) has a container,
init container or ephemeral container that sets NOETL_EHDB_FENCING (in any case: a Windows node matches
environment names regardless of case) or uses envFrom (which may set it).
Ephemeral containers too: a Pod armed only in one is disarmed by a label edit its fieldRef reads, before
the container starts (the ninth red team). Every optional field is guarded by has(): a missing field is
an evaluation error, and an error means failurePolicy. Ephemeral containers are another type, so they
are tested apart rather than joined to the list.
*/}}
{{- define "ehdb-election.cel.podSpecMayArm" -}}
(((has({{ . }}.containers) ? {{ . }}.containers : []) + (has({{ . }}.initContainers) ? {{ . }}.initContainers : [])).exists(c, (has(c.env) && c.env.exists(e, e.name.upperAscii() == 'NOETL_EHDB_FENCING')) || (has(c.envFrom) && size(c.envFrom) > 0)) || (has({{ . }}.ephemeralContainers) && {{ . }}.ephemeralContainers.exists(c, (has(c.env) && c.env.exists(e, e.name.upperAscii() == 'NOETL_EHDB_FENCING')) || (has(c.envFrom) && size(c.envFrom) > 0))))
{{- end }}

{{/*
The namespaceSelector and objectSelector shared by both webhook entries. The objectSelector is always
empty: one that matched on labels would let any object opt out of the guard by carrying (or not
carrying) a label, a per-object bypass. The schema refuses webhook.objectSelector; this check stays for
installs that skip schema validation.
*/}}
{{- define "ehdb-election.webhook.selectors" -}}
{{- if hasKey .Values.webhook "objectSelector" }}
{{- fail "webhook.objectSelector was removed: an object selector lets an object opt out of the guard by its own labels (a per-object bypass). Scope the guard by namespace (webhook.guardedNamespaces, webhook.excludeNamespaces, webhook.namespaceSelector) instead" }}
{{- end }}
{{- if and (has "*" .Values.webhook.guardedNamespaces) (gt (len .Values.webhook.guardedNamespaces) 1) }}
{{- fail (printf "webhook.guardedNamespaces: \"*\" (every namespace) stands alone; it was given with %v, which would not narrow it. List \"*\" or the namespaces, not both" (without .Values.webhook.guardedNamespaces "*")) }}
{{- end }}
{{- $exprs := list }}
{{- if not (has "*" .Values.webhook.guardedNamespaces) }}
{{- $guarded := prepend .Values.webhook.guardedNamespaces .Release.Namespace | uniq }}
{{- $exprs = append $exprs (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" $guarded) }}
{{- end }}
{{- with .Values.webhook.excludeNamespaces }}
{{- $exprs = append $exprs (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" .) }}
{{- end }}
{{- $exprs = concat $exprs (.Values.webhook.namespaceSelector.matchExpressions | default list) }}
{{- $sel := dict }}
{{- with .Values.webhook.namespaceSelector.matchLabels }}
{{- $_ := set $sel "matchLabels" . }}
{{- end }}
{{- if $exprs }}
{{- $_ := set $sel "matchExpressions" $exprs }}
{{- end }}
namespaceSelector: {{- if $sel }}{{ toYaml $sel | nindent 2 }}{{ else }} {}{{ end }}
objectSelector: {}
{{- end }}

{{/*
Annotations of the writer's ServiceAccount, Role and RoleBinding and of the lease guard: kept on `helm
uninstall` (and when an upgrade stops rendering them) unless writer.keepOnUninstall=false. Removing them
under an armed writer drops every token within a lease and the fence then refuses every write. GitOps
tools ignore Helm's policy when they prune (an object left git) and Flux ignores it when it deletes, so
the same objects carry Argo CD's sync options (Prune=false,Delete=false) and Flux's prune exclusion.
*/}}
{{- define "ehdb-election.writer.keepAnnotation" -}}
{{- if .Values.writer.keepOnUninstall }}
helm.sh/resource-policy: keep
argocd.argoproj.io/sync-options: Prune=false,Delete=false
kustomize.toolkit.fluxcd.io/prune: disabled
{{- end }}
{{- end }}

{{/*
ehdb-election.writer.owned: "true" when the live object (a lookup result) belongs to this release, by
the ownership annotations Helm writes (the TLS Secret's adoption uses it). Argument: (list $root $obj).
*/}}
{{- define "ehdb-election.writer.owned" -}}
{{- $root := index . 0 }}
{{- $ann := (index . 1).metadata.annotations | default dict }}
{{- if and (eq (index $ann "meta.helm.sh/release-name" | default "") $root.Release.Name) (eq (index $ann "meta.helm.sh/release-namespace" | default "") $root.Release.Namespace) }}true{{ end }}
{{- end }}

{{/*
ehdb-election.writer.kept: "true" when the live object carries helm.sh/resource-policy: keep (Helm
reads the live object's annotation, not the chart's, when it decides whether to delete it).
*/}}
{{- define "ehdb-election.writer.kept" -}}
{{- $ann := .metadata.annotations | default dict }}
{{- if eq (index $ann "helm.sh/resource-policy" | default "") "keep" }}true{{ end }}
{{- end }}

{{/*
ehdb-election.online: "true" when Helm renders against a cluster (install, upgrade, server-side dry
run), empty for an offline render (`helm template`, client-side dry runs), where lookup answers an
empty map. Listing ServiceAccounts of the release namespace answers a List object even when the
namespace is empty or does not exist yet.
*/}}
{{- define "ehdb-election.online" -}}
{{- if (lookup "v1" "ServiceAccount" .Release.Namespace "") }}true{{ end }}
{{- end }}

{{/*
ehdb-election.webhook.caBundle: the caBundle the API server trusts now (the first one in the live
webhook configuration), empty offline or before anything injected one. Rendered into every entry so
that `helm upgrade --force`, which replaces the configuration with its rendering, keeps it (and a new
entry gets it at once); the rotator or cainjector stays its writer.
*/}}
{{- define "ehdb-election.webhook.caBundle" -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" "" (include "ehdb-election.webhook.configName" .) }}
{{- $ca := "" }}
{{- range ($live.webhooks | default list) }}
{{- if not $ca }}{{ $ca = dig "clientConfig" "caBundle" "" . }}{{ end }}
{{- end }}
{{- $ca }}
{{- end }}

{{/*
ehdb-election.webhook.caBundleLeftLive: a JSON list of the entries whose caBundle is not rendered but
left as the live object has it. Those are the entries of a configuration a chart that renders no
caBundle (0.1.0) wrote, on the upgrade from it: `helm rollback` to that revision removes from the
live object what the current revision's manifest holds and the target's lacks (Helm's three-way
merge), so a caBundle rendered into them here would be emptied by the rollback, and every call fail
until the rotator put it back. The upgrade's own patch leaves them alone (neither manifest has one);
entries that chart lacked still get it (the rollback removes them whole). The cost: a `--force`
upgrade from 0.1.0 PUTs those entries without it (README "Limits").
*/}}
{{- define "ehdb-election.webhook.caBundleLeftLive" -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" "" (include "ehdb-election.webhook.configName" .) }}
{{- $names := list }}
{{- if include "ehdb-election.writtenBy010" $live }}
{{- range ($live.webhooks | default list) }}{{ $names = append $names .name }}{{ end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/*
ehdb-election.writtenBy010: "true" when the live object given (a lookup's answer) was last written by
chart 0.1.0, the previous release: it rendered no caBundle, and its webhook has no RBAC entry. The
upgrade from it, and only that one, must allow for both (caBundleLeftLive; writer-rbac.yaml).
*/}}
{{- define "ehdb-election.writtenBy010" -}}
{{- if eq (dig "metadata" "labels" "helm.sh/chart" "" .) "ehdb-election-0.1.0" }}true{{ end }}
{{- end }}

{{/*
CEL for the RBAC entries' matchConditions (the webhook judges the effect; these only keep changes that
cannot take lease access or a token away from reaching it). Every optional field is guarded by has().
ehdb-election.cel.rulesMayGrantLeases: the rules of the object at the path given may allow get, create,
update or ehdb-elect (the verb the lease guard admits writers by) on coordination.k8s.io leases
(wildcards included).
*/}}
{{- define "ehdb-election.cel.rulesMayGrantLeases" -}}
(has({{ . }}.rules) && {{ . }}.rules.exists(r, has(r.apiGroups) && r.apiGroups.exists(g, g == '*' || g == 'coordination.k8s.io') && has(r.resources) && r.resources.exists(x, x == '*' || x == 'leases') && has(r.verbs) && r.verbs.exists(v, v == '*' || v == 'get' || v == 'create' || v == 'update' || v == 'ehdb-elect')))
{{- end }}

{{/*
ehdb-election.cel.rulesGrantLeaseWildcard: the rules of the object at the path given may grant the
lease guard's wildcard probe on coordination.k8s.io leases (a "*" verb, or the probe verb named): the
lease guard refuses such an account's Lease writes, so a role that grants it can disarm a writer as
a removal does.
*/}}
{{- define "ehdb-election.cel.rulesGrantLeaseWildcard" -}}
(has({{ . }}.rules) && {{ . }}.rules.exists(r, has(r.apiGroups) && r.apiGroups.exists(g, g == '*' || g == 'coordination.k8s.io') && has(r.resources) && r.resources.exists(x, x == '*' || x == 'leases') && has(r.verbs) && r.verbs.exists(v, v == '*' || v == 'ehdb-elect-wildcard-probe')))
{{- end }}

{{/*
ehdb-election.cel.webhooksOwnRole: the role is one of the webhook's own (its ClusterRole, its Role
in the release namespace, its read Role in each guarded namespace): the webhook refuses an edit that
takes the reads it verifies writers with, which grant no lease verb the condition above would see.
*/}}
{{- define "ehdb-election.cel.webhooksOwnRole" -}}
{{- $fullname := include "ehdb-election.webhook.fullname" . -}}
(oldObject.metadata.name == '{{ $fullname }}' || oldObject.metadata.name == '{{ $fullname }}-guard')
{{- end }}

{{/*
ehdb-election.cel.changed: the field given differs between oldObject and object (an UPDATE).
*/}}
{{- define "ehdb-election.cel.changed" -}}
(has(object.{{ . }}) != has(oldObject.{{ . }}) || (has(object.{{ . }}) && object.{{ . }} != oldObject.{{ . }}))
{{- end }}

{{/*
ehdb-election.cel.completesDeletion: an UPDATE that removes the last finalizer of an object in
deletion, which deletes it (the API server's ShouldDeleteDuringUpdate): judged as that DELETE.
*/}}
{{- define "ehdb-election.cel.completesDeletion" -}}
(request.operation == 'UPDATE' && has(oldObject.metadata.deletionTimestamp) && (!has(object.metadata.finalizers) || size(object.metadata.finalizers) == 0))
{{- end }}

{{/*
ehdb-election.cel.tokenTurnedOff: a ServiceAccount UPDATE that sets automountServiceAccountToken to false.
*/}}
{{- define "ehdb-election.cel.tokenTurnedOff" -}}
has(object.automountServiceAccountToken) && !object.automountServiceAccountToken && (!has(oldObject.automountServiceAccountToken) || oldObject.automountServiceAccountToken)
{{- end }}

{{/*
ehdb-election.cel.subjectsMayBeAccounts: a subject of the binding (dict "root", "obj": the CEL path)
names a ServiceAccount of a guarded namespace, its user name, or a group its token carries
(system:serviceaccounts, system:serviceaccounts:<ns>, system:authenticated). A RoleBinding's
ServiceAccount subject without a namespace is one of the binding's namespace, which is guarded.
*/}}
{{- define "ehdb-election.cel.subjectsMayBeAccounts" -}}
{{- $root := .root }}
{{- $o := .obj }}
{{- $all := has "*" $root.Values.webhook.guardedNamespaces }}
{{- $guarded := prepend $root.Values.webhook.guardedNamespaces $root.Release.Namespace | uniq }}
{{- $ns := list }}
{{- $groups := list }}
{{- range sortAlpha $guarded }}
{{- $ns = append $ns (printf "'%s'" .) }}
{{- $groups = append $groups (printf "'system:serviceaccounts:%s'" .) }}
{{- end }}
{{- $nsList := printf "[%s]" (join ", " $ns) }}
{{- $groupList := printf "[%s]" (join ", " $groups) }}
{{- if $all -}}
(has({{ $o }}.subjects) && {{ $o }}.subjects.exists(s, s.kind == 'ServiceAccount' || (s.kind == 'User' && s.name.startsWith('system:serviceaccount:')) || (s.kind == 'Group' && (s.name == 'system:authenticated' || s.name.startsWith('system:serviceaccounts')))))
{{- else -}}
(has({{ $o }}.subjects) && {{ $o }}.subjects.exists(s, (s.kind == 'ServiceAccount' && (!has(s.namespace) || s.namespace == '' || s.namespace in {{ $nsList }})) || (s.kind == 'User' && s.name.startsWith('system:serviceaccount:')) || (s.kind == 'Group' && (s.name == 'system:authenticated' || s.name == 'system:serviceaccounts' || s.name in {{ $groupList }}))))
{{- end }}
{{- end }}

{{/*
CEL, for matchConditions: false for a DELETE by the namespace controller (as kube-controller-manager
runs it with --use-service-account-credentials, as kubeadm and the managed offerings do), which deletes
only in a namespace being deleted.
*/}}
{{- define "ehdb-election.cel.notNamespaceController" -}}
!(request.operation == 'DELETE' && request.userInfo.username == 'system:serviceaccount:kube-system:namespace-controller')
{{- end }}
