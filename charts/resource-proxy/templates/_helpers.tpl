{{/*
The labels every object of the chart carries.
*/}}
{{- define "resource-proxy.labels" -}}
app.kubernetes.io/name: resource-proxy
app.kubernetes.io/part-of: kube-tenancy
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The client's name (config.client.name): it names the Lease and the serving-certificate Secret
the RBAC grants by name.
*/}}
{{- define "resource-proxy.clientName" -}}
{{- required "config.client.name is required" .Values.config.client.name -}}
{{- end -}}

{{/*
The Prometheus Operator objects' extra labels (a Prometheus selects monitors and rules by them).
*/}}
{{- define "resource-proxy.monitoringLabels" -}}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Everything the proxy finds in kube-system (its Lease, its Secrets, the ExternalName Services,
the request-header ConfigMap) is there whatever the release namespace: refuse another one.
*/}}
{{- define "resource-proxy.namespace" -}}
{{- if ne .Release.Namespace "kube-system" -}}
{{- fail (printf "install the resource proxy into kube-system (helm install -n kube-system), not %q: its Lease, Secrets and wiring Services live there" .Release.Namespace) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/*
The port of config.metrics.address (default 9099): the probes and the PodMonitor use it.
*/}}
{{- define "resource-proxy.metricsPort" -}}
{{- $addr := "0.0.0.0:9099" -}}
{{- with .Values.config.metrics }}{{ with .address }}{{ $addr = . }}{{ end }}{{ end -}}
{{- regexReplaceAll "^.*:" $addr "" -}}
{{- end -}}
