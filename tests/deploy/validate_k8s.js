// Validates Kubernetes objects against the API schema of their kind, offline,
// with npm's kubernetes-models (core API) and its prometheus-operator models
// (ServiceMonitor). Input: a JSON file holding an array of objects (rendered
// by `kubectl kustomize`). Prints one line per object; exits 1 when any
// object is invalid or of a kind without a schema.
'use strict';
const fs = require('fs');

// apiVersion -> the package folder that holds its models.
function modulePath(apiVersion) {
  if (apiVersion.startsWith('monitoring.coreos.com/')) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  }
  return `kubernetes-models/${apiVersion}`;
}

function main() {
  if (process.argv.length !== 3) {
    console.error('usage: node validate_k8s.js OBJECTS.json');
    return 2;
  }
  const objects = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  if (!Array.isArray(objects) || objects.length === 0) {
    console.error('validate_k8s: expected a non-empty array of objects');
    return 2;
  }
  let failures = 0;
  for (const object of objects) {
    const name = `${object.kind}/${object.metadata && object.metadata.name}`;
    let Model;
    try {
      Model = require(modulePath(String(object.apiVersion)))[object.kind];
    } catch (e) {
      Model = undefined;
    }
    if (typeof Model !== 'function') {
      console.log(`INVALID ${name}: no schema for ${object.apiVersion} ${object.kind}`);
      failures++;
      continue;
    }
    try {
      new Model(object).validate();
      console.log(`valid ${name} (${object.apiVersion})`);
    } catch (e) {
      console.log(`INVALID ${name}: ${e.message}`);
      failures++;
    }
  }
  return failures === 0 ? 0 : 1;
}

process.exitCode = main();
