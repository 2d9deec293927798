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
The writer's ServiceAccount name. The schema already refuses "default" and ""; this check stays for
installs that skip schema validation, because the mistake it prevents is silent and wide.
*/}}
{{- define "ehdb-election.writer.serviceAccountName" -}}
{{- $name := .Values.writer.serviceAccount.name | default "" }}
{{- if or (eq $name "") (eq $name "default") }}
{{- fail "writer.serviceAccount.name must name a dedicated ServiceAccount, not \"default\" or empty: a binding to default grants lease writes to every pod in the namespace that names no account" }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "ehdb-election.webhook.image" -}}
{{- $img := .Values.webhook.image }}
{{- $ref := printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
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
The namespaceSelector and objectSelector shared by both webhook entries.
*/}}
{{- define "ehdb-election.webhook.selectors" -}}
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
objectSelector: {{- with .Values.webhook.objectSelector }}{{ toYaml . | nindent 2 }}{{ else }} {}{{ end }}
{{- end }}

{{/*
The ValidatingWebhookConfiguration. Rendered twice: as the release's object, and as the pre-delete
hook that removes it first on uninstall (see webhook-configuration-predelete.yaml). Argument: a dict
with "root" (the top context) and "hook" (bool).
*/}}
{{- define "ehdb-election.webhook.configuration" -}}
{{- $root := .root }}
{{- with $root }}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ include "ehdb-election.webhook.configName" . }}
  labels:
    {{- include "ehdb-election.webhook.labels" . | nindent 4 }}
    {{- with .Values.webhook.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $annotations := dict }}
  {{- if $.hook }}
  {{- $_ := set $annotations "helm.sh/hook" "pre-delete" }}
  {{- $_ := set $annotations "helm.sh/hook-weight" "-100" }}
  {{- $_ := set $annotations "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded" }}
  {{- end }}
  {{- if .Values.certManager.enabled }}
  {{- $_ := set $annotations "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace (include "ehdb-election.webhook.certificateName" .)) }}
  {{- end }}
  {{- $annotations = merge $annotations (.Values.webhook.annotations | default dict) }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
webhooks:
  # Workloads fail closed: a rollout that arms enforce must not slip past a guard that is down.
  - name: workloads.ehdb-election.noetl.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
    failurePolicy: {{ .Values.webhook.failurePolicy.workloads }}
    matchPolicy: Equivalent
    clientConfig:
      service:
        name: {{ include "ehdb-election.webhook.serviceName" . }}
        namespace: {{ .Release.Namespace }}
        path: /validate
        port: {{ .Values.webhook.service.port }}
    rules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["statefulsets", "deployments", "daemonsets", "replicasets"]
        scope: Namespaced
      - apiGroups: ["batch"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["jobs", "cronjobs"]
        scope: Namespaced
    {{- include "ehdb-election.webhook.selectors" . | nindent 4 }}
    matchConditions:
      # Only pod templates that could arm the fence reach the webhook, so its outage never blocks
      # unrelated workloads. A CronJob's template is one level deeper than the others'.
      - name: pod-template-may-arm-fencing
        expression: >-
          has(object.spec) && (has(object.spec.jobTemplate)
          ? (has(object.spec.jobTemplate.spec) && has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.spec)
          && {{ include "ehdb-election.cel.podSpecMayArm" "object.spec.jobTemplate.spec.template.spec" }})
          : (has(object.spec.template) && has(object.spec.template.spec)
          && {{ include "ehdb-election.cel.podSpecMayArm" "object.spec.template.spec" }}))
  # Pods fail open: a guard outage must never stop a controller from recreating a crashed writer's Pod.
  - name: pods.ehdb-election.noetl.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
    failurePolicy: {{ .Values.webhook.failurePolicy.pods }}
    matchPolicy: Equivalent
    clientConfig:
      service:
        name: {{ include "ehdb-election.webhook.serviceName" . }}
        namespace: {{ .Release.Namespace }}
        path: /validate
        port: {{ .Values.webhook.service.port }}
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
        scope: Namespaced
    {{- include "ehdb-election.webhook.selectors" . | nindent 4 }}
    matchConditions:
      - name: pod-may-arm-fencing
        expression: >-
          has(object.spec) && {{ include "ehdb-election.cel.podSpecMayArm" "object.spec" }}
  # ConfigMaps whose data may arm a writer that reads them (any value containing "enforce", in any
  # case): the webhook judges each guarded workload that reads the ConfigMap as if the workload
  # itself were armed by the change. Workloads' failure policy: arming must not slip past a guard that is down.
  - name: configmaps.ehdb-election.noetl.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
    failurePolicy: {{ .Values.webhook.failurePolicy.workloads }}
    matchPolicy: Equivalent
    clientConfig:
      service:
        name: {{ include "ehdb-election.webhook.serviceName" . }}
        namespace: {{ .Release.Namespace }}
        path: /validate
        port: {{ .Values.webhook.service.port }}
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["configmaps"]
        scope: Namespaced
    {{- include "ehdb-election.webhook.selectors" . | nindent 4 }}
    matchConditions:
      - name: data-may-arm-fencing
        expression: >-
          has(object.data) && object.data.exists(k, object.data[k].lowerAscii().contains('enforce'))
{{- end }}
{{- end }}
