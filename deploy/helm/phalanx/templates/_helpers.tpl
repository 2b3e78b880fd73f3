{{/* Names and labels shared by every template. */}}

{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "phalanx.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "phalanx.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "phalanx.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "phalanx.operator.fullname" -}}
{{- printf "%s-operator" (include "phalanx.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "phalanx.agent.fullname" -}}
{{- printf "%s-agent" (include "phalanx.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "phalanx.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: phalanx
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "operator"). */}}
{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "phalanx.operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "phalanx.operator.fullname" .) .Values.serviceAccount.operatorName -}}
{{- else -}}
{{- required "serviceAccount.operatorName is required when serviceAccount.create is false" .Values.serviceAccount.operatorName -}}
{{- end -}}
{{- end -}}

{{- define "phalanx.agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "phalanx.agent.fullname" .) .Values.serviceAccount.agentName -}}
{{- else -}}
{{- required "serviceAccount.agentName is required when serviceAccount.create is false" .Values.serviceAccount.agentName -}}
{{- end -}}
{{- end -}}

{{/* An image reference: include with (dict "ctx" $ "image" .Values.operator.image). */}}
{{- define "phalanx.image" -}}
{{- $registry := .ctx.Values.global.imageRegistry -}}
{{- $tag := default .ctx.Chart.AppVersion .image.tag -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}
