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
CEL, for matchConditions: true when a pod spec (at the path given as the argument) has a container or
init container that sets NOETL_EHDB_FENCING or uses envFrom (which may set it). Every optional field is
guarded by has(): a missing field is an evaluation error, and an error means failurePolicy.
*/}}
{{- define "ehdb-election.cel.podSpecMayArm" -}}
((has({{ . }}.containers) ? {{ . }}.containers : []) + (has({{ . }}.initContainers) ? {{ . }}.initContainers : [])).exists(c, (has(c.env) && c.env.exists(e, e.name == 'NOETL_EHDB_FENCING')) || (has(c.envFrom) && size(c.envFrom) > 0))
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
the ownership annotations Helm writes. Argument: (list $root $obj).
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
The refusal to disarm. Before Helm applies an install or upgrade, compare what the cluster has (Helm's
lookup of the live objects this release owns) with what this rendering keeps:
  - a writer ServiceAccount the release owns is deleted when it is no longer rendered (create=false,
    or renamed) and is not marked keep;
  - a ServiceAccount the release's RoleBinding binds is unbound when the RoleBinding now names another
    account, or when the RoleBinding or Role go (rbac.create=false) without keep.
If an account would be lost, and a workload or Pod of the namespace runs as it with a container that
sets NOETL_EHDB_FENCING=enforce literally, rendering fails and says what to do first. Lookups answer
nothing offline (`helm template`, client-side dry runs), so those render unchanged; the workloads are
only listed when an account would actually be lost.
*/}}
{{- define "ehdb-election.writer.refuseDisarm" -}}
{{- $root := . }}
{{- $ns := .Release.Namespace }}
{{- $newSA := include "ehdb-election.writer.serviceAccountName" . }}
{{- $roleName := include "ehdb-election.writer.roleName" . }}
{{- $lost := dict }}
{{- /* Accounts the release's RoleBinding binds today. */}}
{{- $rb := lookup "rbac.authorization.k8s.io/v1" "RoleBinding" $ns $roleName }}
{{- if and $rb (include "ehdb-election.writer.owned" (list $root $rb)) }}
{{- $role := lookup "rbac.authorization.k8s.io/v1" "Role" $ns $roleName }}
{{- $roleGoes := and (not .Values.writer.rbac.create) $role (include "ehdb-election.writer.owned" (list $root $role)) (not (include "ehdb-election.writer.kept" $role)) }}
{{- $rbGoes := and (not .Values.writer.rbac.create) (not (include "ehdb-election.writer.kept" $rb)) }}
{{- range $rb.subjects | default list }}
{{- if and (eq .kind "ServiceAccount") (eq (.namespace | default $ns) $ns) }}
{{- if or $rbGoes $roleGoes }}
{{- $_ := set $lost .name (printf "writer.rbac.create=false deletes the Role and RoleBinding %s" $roleName) }}
{{- else if and $root.Values.writer.rbac.create (ne .name $newSA) }}
{{- $_ := set $lost .name (printf "the RoleBinding %s would bind %s instead" $roleName $newSA) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Writer accounts the release created. */}}
{{- $sas := lookup "v1" "ServiceAccount" $ns "" }}
{{- range ($sas.items | default list) }}
{{- if and (include "ehdb-election.writer.owned" (list $root .)) (eq (index (.metadata.labels | default dict) "app.kubernetes.io/component" | default "") "writer-election") (not (include "ehdb-election.writer.kept" .)) }}
{{- if not (and $root.Values.writer.serviceAccount.create (eq .metadata.name $newSA)) }}
{{- $_ := set $lost .metadata.name (printf "the ServiceAccount %s would be deleted (writer.serviceAccount: create=%v, name=%s)" .metadata.name $root.Values.writer.serviceAccount.create $newSA) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $lost }}
{{- $armed := list }}
{{- range $kind := list "StatefulSet" "Deployment" "DaemonSet" "ReplicaSet" "Job" "CronJob" "Pod" }}
{{- $api := "apps/v1" }}
{{- if has $kind (list "Job" "CronJob") }}{{ $api = "batch/v1" }}{{ end }}
{{- if eq $kind "Pod" }}{{ $api = "v1" }}{{ end }}
{{- range ((lookup $api $kind $ns "").items | default list) }}
{{- $spec := dict }}
{{- if eq $kind "Pod" }}
{{- $spec = .spec | default dict }}
{{- else if eq $kind "CronJob" }}
{{- $spec = dig "spec" "jobTemplate" "spec" "template" "spec" dict . }}
{{- else }}
{{- $spec = dig "spec" "template" "spec" dict . }}
{{- end }}
{{- $sa := $spec.serviceAccountName | default $spec.serviceAccount | default "default" }}
{{- if hasKey $lost $sa }}
{{- $isArmed := false }}
{{- range (concat ($spec.containers | default list) ($spec.initContainers | default list)) }}
{{- range (.env | default list) }}
{{- if and (eq .name "NOETL_EHDB_FENCING") (eq (.value | default "" | toString | trim | lower) "enforce") }}
{{- $isArmed = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if $isArmed }}
{{- $armed = append $armed (printf "%s/%s (ServiceAccount %s: %s)" $kind .metadata.name $sa (index $lost $sa)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $armed }}
{{- $shown := $armed }}
{{- if gt (len $armed) 5 }}
{{- $shown = append (slice $armed 0 5) (printf "and %d more" (sub (len $armed) 5)) }}
{{- end }}
{{- fail (printf "refusing to disarm armed writers in namespace %s: %s. These run with NOETL_EHDB_FENCING=enforce; without their ServiceAccount's lease RBAC every token drops within a lease and the fence refuses every write. Remove in the reverse order of arming: set NOETL_EHDB_FENCING=shadow (or off) on these writers, wait for the rollout to finish, then apply this change" $ns (join "; " $shown)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
ehdb-election.online: "true" when Helm renders against a cluster (install, upgrade, server-side dry
run), empty for an offline render (`helm template`, client-side dry runs), where lookup answers an
empty map. Listing ServiceAccounts of the release namespace answers a List object even when the
namespace is empty or does not exist yet; the disarm check below needs the same permission.
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
