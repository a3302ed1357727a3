{{/* Names and labels shared by every object of the chart. */}}

{{- define "slurmkube.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; object names are derived from it (63 characters: DNS label). */}}
{{- define "slurmkube.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Kubernetes recommended labels. */}}
{{- define "slurmkube.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "slurmkube.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Immutable once a Deployment exists: never add release-varying values here. */}}
{{- define "slurmkube.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurmkube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slurmkube.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slurmkube.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image. No default registry: without image.registry,
image.repository or image.digest the chart fails rather than name a public
repository someone else could claim (the operator reads every cluster's keys).
*/}}
{{- define "slurmkube.image" -}}
{{- $image := .Values.image }}
{{- $repository := $image.repository }}
{{- if and (not $repository) $image.registry }}
{{- $repository = printf "%s/operator" (trimSuffix "/" $image.registry) }}
{{- end }}
{{- if and (not $repository) $image.digest }}
{{- $repository = "slurmkube/operator" }}
{{- end }}
{{- if not $repository }}
{{- fail "image.registry is required (or image.repository, or image.digest): the registry you pushed `make images` to. The chart has no default, so it never pulls a name someone else can claim." }}
{{- end }}
{{- if $image.digest }}
{{- printf "%s@%s" $repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
Rules for namespaced kinds: in a ClusterRole when the operator watches every
namespace, in a Role in watchNamespace otherwise. One list, so the two modes
cannot drift apart. Every verb names its caller (tests/unit/test_helm.py
checks each against the code); no wildcards. Secrets are apart
(slurmkube.secretRules): never granted with list or watch.
*/}}
{{- define "slurmkube.namespacedRules" -}}
- apiGroups: [slurmkube.io]
  resources: [slurmclusters]
  # get: controllers/observe.py and lending.py read the cluster by name.
  # list/watch: kopf's watch (controllers/handlers.py cluster_event).
  # patch: kopf's finalizer and progress annotations (the on.delete handler).
  verbs: [get, list, watch, patch]
- apiGroups: [slurmkube.io]
  resources: [nodesets]
  # list/watch: kopf's watch and controllers/observe.py, lending_observe.py.
  # patch: kopf's finalizer (node_set_deleted holds a NodeSet until drained).
  verbs: [list, watch, patch]
- apiGroups: [slurmkube.io]
  resources: [slurmclusters/status, nodesets/status]
  # patch: controllers/status.py writes conditions and counts (merge patch).
  verbs: [patch]
- apiGroups: [slurmkube.io]
  resources: [allocationsources]
  # get/list/watch: the allocation policy's sources. patch: kopf's finalizer
  # (its Kueue queues are cluster-scoped, so they go by label on deletion).
  verbs: [get, list, watch, patch]
- apiGroups: [slurmkube.io]
  resources: [allocationsources/status]
  # patch: per-team quota, usage, headroom, gates; Synced, SourceReachable.
  verbs: [patch]
- apiGroups: [slurmkube.io]
  resources: [slurmclusters/finalizers, nodesets/finalizers]
  # update: children carry owner references with blockOwnerDeletion, which the
  # OwnerReferencesPermissionEnforcement admission plugin allows only to
  # those who may update the owner's finalizers.
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  # get/list/watch: slurmd and daemon pods (observe, kopf's slurmd pod watch,
  # the test bed's pod-IP endpoints). create/patch: slurmd pods by server-side
  # apply (an apply that creates needs create too); patch also sets the
  # slurmctld pod's config-hash annotation. delete: a drained slurmd pod.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  # patch: the slurmkube.io/SlurmNode condition of each slurmd pod.
  verbs: [patch]
- apiGroups: [""]
  resources: [services]
  # create/patch: server-side apply of the daemons' Services. delete: the
  # slurmdbd Service when accounting is switched off.
  verbs: [create, patch, delete]
- apiGroups: [""]
  resources: [configmaps]
  # create/patch: server-side apply of slurm.conf and friends; get: where the
  # files place each node, after an operator restart (controllers/topology_moves.py).
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [events]
  # create: an Event per action (kube/client.py Kube.event, kopf's posting).
  verbs: [create]
- apiGroups: [apps]
  resources: [statefulsets]
  # get: slurmctld's image and rollout, for a Slurm upgrade's order
  # (controllers/upgrade_observe.py). create/patch: server-side apply of slurmctld.
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  # create/patch: server-side apply of each NodeSet's busy-slurmd-pod budget.
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [deployments]
  # get: their images and rollout, for a Slurm upgrade's order
  # (controllers/upgrade_observe.py). create/patch: server-side apply of
  # slurmrestd, login and slurmdbd. delete: slurmdbd when accounting is switched off.
  verbs: [get, create, patch, delete]
{{- if .Values.rbac.kueue }}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  # list/watch: kopf's watch and the bridge's round (controllers/lending.py).
  # patch: the annotation naming the tier the policy gave a pending
  # Workload's job (controllers/policy_apply.py label_tiers).
  verbs: [list, watch, patch]
- apiGroups: [batch]
  resources: [jobs]
  # patch: a pending job's kueue.x-k8s.io/priority-class label, the team's
  # tier under the allocation policy (controllers/policy_apply.py label_tiers).
  verbs: [patch]
- apiGroups: [jobset.x-k8s.io]
  resources: [jobsets]
  # patch: as for jobs.
  verbs: [patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  # patch: server-side apply of the admission check's state and podSetUpdates.
  verbs: [patch]
{{- end }}
{{- end }}

{{/*
Secrets, by name only: the auth keys (<cluster>-auth or the Secrets a
SlurmCluster names) and the database login are read with get; the keys are
created once; slurmdbd.conf is applied (create/patch) and deleted when
accounting is switched off. No list or watch: nothing reads every Secret.
*/}}
{{- define "slurmkube.secretRules" -}}
- apiGroups: [""]
  resources: [secrets]
  # get: kube/client.py Kube.secret_value (slurm.key, jwt.key, database login).
  # create: the generated keys (create_if_absent) and slurmdbd.conf (apply).
  # patch: slurmdbd.conf (server-side apply). delete: slurmdbd.conf when
  # accounting is switched off, so the password does not outlive its use.
  verbs: [get, create, patch, delete]
{{- end }}

{{/* The namespaces that hold SlurmClusters, as a list (NetworkPolicies go there). */}}
{{- define "slurmkube.clusterNamespaces" -}}
{{- if .Values.watchNamespace }}
{{- list .Values.watchNamespace | toJson }}
{{- else }}
{{- .Values.clusterNamespaces | default list | toJson }}
{{- end }}
{{- end }}

{{/* A NetworkPolicy peer: the operator's pods in the release namespace. */}}
{{- define "slurmkube.operatorPeer" -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .Release.Namespace }}
  podSelector:
    matchLabels:
      {{- include "slurmkube.selectorLabels" . | nindent 6 }}
{{- end }}
