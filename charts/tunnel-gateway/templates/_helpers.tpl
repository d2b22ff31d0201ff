{{/*
The image reference of an `image` value ({repository, tag}); the tag defaults to the chart's
appVersion. Call with (dict "image" .Values.x.image "root" $).
*/}}
{{- define "tunnel-gateway.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion | toString) -}}
{{- end -}}

{{/*
The labels every object of the chart carries (besides its own name and component labels).
*/}}
{{- define "tunnel-gateway.labels" -}}
app.kubernetes.io/part-of: tunnel-gateway
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The Prometheus Operator objects' extra labels (a Prometheus selects monitors and rules by them).
*/}}
{{- define "tunnel-gateway.monitoringLabels" -}}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
monitoring.prometheusNamespaceLabels as the controller's `k=v,...` flag value.
*/}}
{{- define "tunnel-gateway.prometheusNamespaceLabels" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.monitoring.prometheusNamespaceLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
