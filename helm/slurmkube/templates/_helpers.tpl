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

{{- define "slurmkube.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Rules for namespaced kinds: in a ClusterRole when the operator watches every
namespace, in a Role in watchNamespace otherwise. One list, so the two modes
cannot drift apart. Every verb says why; no wildcards.
*/}}
{{- define "slurmkube.namespacedRules" -}}
- apiGroups: [slurmkube.io]
  resources: [slurmclusters, nodesets]
  # get/list/watch: kopf watches both kinds and the controllers read them.
  # patch: kopf adds its finalizer and records handler progress in annotations.
  verbs: [get, list, watch, patch]
- apiGroups: [slurmkube.io]
  resources: [slurmclusters/status, nodesets/status]
  # get/patch: observedGeneration, conditions, node and GPU counts.
  verbs: [get, patch]
- apiGroups: [slurmkube.io]
  resources: [nodesets/scale]
  # get: read the replica count HPA/KEDA set through the scale subresource.
  verbs: [get]
- apiGroups: [slurmkube.io]
  resources: [allocationsources]
  # get/list/watch: the allocation policy's sources. patch: kopf's finalizer
  # (its Kueue queues are cluster-scoped, so they go by label on deletion).
  verbs: [get, list, watch, patch]
- apiGroups: [slurmkube.io]
  resources: [allocationsources/status]
  # get/patch: per-team quota, usage, headroom, gates; Synced, SourceReachable.
  verbs: [get, patch]
- apiGroups: [slurmkube.io]
  resources: [slurmclusters/finalizers, nodesets/finalizers]
  # update: children carry owner references with blockOwnerDeletion, which the
  # OwnerReferencesPermissionEnforcement admission plugin allows only to
  # those who may update the owner's finalizers.
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  # get/list/watch: slurmd and daemon pods, and which node each runs on.
  # create/patch: slurmd pods by server-side apply (an apply that creates
  # needs create as well as patch); patch also sets the slurmctld pod's
  # slurmkube.io/config-hash annotation, which makes the kubelet sync its
  # config volume at once. delete: a slurmd pod, only after its node drained.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  # patch: the slurmkube.io/SlurmNode condition mirrors each slurmd pod's Slurm
  # node state (a strategic merge of that one condition).
  verbs: [patch]
- apiGroups: [""]
  resources: [pods/exec]
  # create, get: scontrol inside the slurmctld pod when slurmrestd is off.
  # WebSocket exec (the Python client's) is authorized as get before
  # Kubernetes 1.35 and additionally as create from 1.35 on
  # (AuthorizePodWebsocketUpgradeCreatePermission); SPDY exec needs create.
  verbs: [create, get]
- apiGroups: [""]
  resources: [services, configmaps]
  # get/list/watch: observe what was applied. create/patch: server-side apply
  # of slurm.conf and friends and of the slurmctld/slurmrestd Services.
  # delete: a component that was switched off (login set, accounting).
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  # get/list/watch: the auth keys (slurm.key, jwt.key) and the database
  # credentials a SlurmCluster references. create/patch: keys generated once
  # when none is referenced, and slurmdbd.conf (it holds the database
  # password). delete: that slurmdbd.conf Secret when accounting is switched
  # off, so the password does not outlive its use; generated keys go with
  # their SlurmCluster through the garbage collector, never by the operator.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  # get/list/watch: report a slurmctld state volume that does not bind. The
  # StatefulSet controller creates the claims, not the operator.
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  # create/patch: Events for significant actions (kopf posts with create;
  # patch updates the count of a repeated event).
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  # create/patch: the same, through the events.k8s.io/v1 API.
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [statefulsets, deployments]
  # get/list/watch: rollout state for conditions. create/patch: server-side
  # apply of slurmctld (StatefulSet) and slurmrestd/login (Deployments).
  # delete: a component that was switched off.
  verbs: [get, list, watch, create, patch, delete]
{{- if .Values.rbac.kueue }}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  # get/list/watch: workloads waiting on the slurmkube admission check.
  # patch: kopf's finalizer, so lent nodes are returned before a workload goes.
  verbs: [get, list, watch, patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  # get/patch: set the admission check's state and podSetUpdates.
  verbs: [get, patch]
{{- end }}
{{- end }}
