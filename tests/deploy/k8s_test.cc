// deploy/k8s/ checked with yaml-cpp (kubeconform and kubectl are not packaged here): the kinds
// and required fields of each object, and that the files agree with each other and with
// adctld: the StatefulSet's selector, the Service's ports and the container ports, the
// Prometheus annotations, the data PVC at adctld's --data-dir, the rank pods' --coordinator at
// the Service's stable name, world size = completions = parallelism.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace adctl {
namespace {

std::vector<YAML::Node> LoadAll(const std::string& name) {
  return YAML::LoadAllFromFile(std::string(ADCTL_DEPLOY_DIR) + "/k8s/" + name);
}

const YAML::Node* FindKind(const std::vector<YAML::Node>& docs, const std::string& kind) {
  for (const auto& d : docs) {
    if (d["kind"] && d["kind"].as<std::string>() == kind) return &d;
  }
  return nullptr;
}

int PortOf(const std::string& host_port) {
  return std::stoi(host_port.substr(host_port.rfind(':') + 1));
}

class K8sTest : public ::testing::Test {
 protected:
  void SetUp() override {
    adctld_ = LoadAll("adctld.yaml");
    training_ = LoadAll("training-job.yaml");
    for (const auto* docs : {&adctld_, &training_}) {
      for (const auto& d : *docs) {
        ASSERT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << YAML::Dump(d);
      }
    }
    const YAML::Node* cm = FindKind(adctld_, "ConfigMap");
    ASSERT_NE(cm, nullptr);
    config_ = YAML::Load((*cm)["data"]["adctld.yaml"].as<std::string>());
  }
  std::vector<YAML::Node> adctld_, training_;
  YAML::Node config_;  // adctld --config
};

TEST_F(K8sTest, AdctldStatefulSetServiceAndConfigAgree) {
  const YAML::Node* sts = FindKind(adctld_, "StatefulSet");
  const YAML::Node* svc = FindKind(adctld_, "Service");
  ASSERT_NE(sts, nullptr);
  ASSERT_NE(svc, nullptr);
  ASSERT_NE(FindKind(adctld_, "Namespace"), nullptr);
  const std::string ns = (*sts)["metadata"]["namespace"].as<std::string>();
  EXPECT_EQ((*svc)["metadata"]["namespace"].as<std::string>(), ns);
  EXPECT_EQ((*sts)["spec"]["replicas"].as<int>(), 1) << "SQLite: one writer";
  EXPECT_EQ((*sts)["spec"]["serviceName"].as<std::string>(),
            (*svc)["metadata"]["name"].as<std::string>());
  EXPECT_EQ((*svc)["spec"]["clusterIP"].as<std::string>(), "None");

  // Selector = template labels = the Service's selector.
  const YAML::Node pod = (*sts)["spec"]["template"];
  for (const auto& kv : (*sts)["spec"]["selector"]["matchLabels"]) {
    const std::string key = kv.first.as<std::string>();
    EXPECT_EQ(pod["metadata"]["labels"][key].as<std::string>(), kv.second.as<std::string>());
    EXPECT_EQ((*svc)["spec"]["selector"][key].as<std::string>(), kv.second.as<std::string>());
  }

  // Ports: adctld's --listen / --http = the container ports = the Service ports.
  std::map<std::string, int> container_ports;
  const YAML::Node container = pod["spec"]["containers"][0];
  for (const auto& p : container["ports"]) {
    container_ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
  }
  EXPECT_EQ(container_ports["grpc"], PortOf(config_["listen"].as<std::string>()));
  EXPECT_EQ(container_ports["http"], PortOf(config_["http"].as<std::string>()));
  for (const auto& p : (*svc)["spec"]["ports"]) {
    const std::string name = p["name"].as<std::string>();
    ASSERT_TRUE(container_ports.count(name)) << name;
    EXPECT_EQ(p["port"].as<int>(), container_ports[name]) << name;
    EXPECT_EQ(p["targetPort"].as<std::string>(), name);
  }
  // Listening beyond loopback needs tokens (adctld refuses otherwise): the file is mounted.
  EXPECT_EQ(config_["listen"].as<std::string>().rfind("0.0.0.0:", 0), 0u);
  ASSERT_TRUE(config_["tokens-file"]);

  // Prometheus scrapes /metrics on the HTTP port.
  const YAML::Node ann = pod["metadata"]["annotations"];
  EXPECT_EQ(ann["prometheus.io/scrape"].as<std::string>(), "true");
  EXPECT_EQ(std::stoi(ann["prometheus.io/port"].as<std::string>()), container_ports["http"]);
  EXPECT_EQ(ann["prometheus.io/path"].as<std::string>(), "/metrics");
  EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");

  // The data PVC is mounted at --data-dir; the config file where --config reads it.
  const std::string claim =
      (*sts)["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as<std::string>();
  std::map<std::string, std::string> mounts;
  for (const auto& m : container["volumeMounts"]) {
    mounts[m["name"].as<std::string>()] = m["mountPath"].as<std::string>();
  }
  EXPECT_EQ(mounts[claim], config_["data-dir"].as<std::string>());
  std::vector<std::string> args = container["args"].as<std::vector<std::string>>();
  auto config_flag = std::find(args.begin(), args.end(), "--config");
  ASSERT_NE(config_flag, args.end());
  EXPECT_EQ(*(config_flag + 1), mounts["config"]);
  EXPECT_EQ(mounts["tokens"] + "/tokens.yaml", config_["tokens-file"].as<std::string>());

  // Ranks reach adctld by the pod's stable DNS name through the headless Service.
  const std::string advertised = sts->operator[]("metadata")["name"].as<std::string>() + "-0." +
                                 (*svc)["metadata"]["name"].as<std::string>() + "." + ns +
                                 ".svc.cluster.local:" + std::to_string(container_ports["grpc"]);
  EXPECT_EQ(config_["worker-advertise-address"].as<std::string>(), advertised);
}

TEST_F(K8sTest, TrainingJobIsIndexedOnePodPerGpuAndDialsAdctld) {
  const YAML::Node* job = FindKind(training_, "Job");
  ASSERT_NE(job, nullptr);
  const YAML::Node spec = (*job)["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  const int world = spec["completions"].as<int>();
  EXPECT_EQ(spec["parallelism"].as<int>(), world);
  EXPECT_EQ(spec["backoffLimit"].as<int>(), 0) << "adctld decides restarts";
  const YAML::Node pod = spec["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
  const YAML::Node rank = pod["containers"][0];
  EXPECT_EQ(rank["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  const std::string command = rank["args"][0].as<std::string>();
  EXPECT_NE(command.find("--rank \"$JOB_COMPLETION_INDEX\""), std::string::npos) << command;
  EXPECT_NE(command.find("--world-size " + std::to_string(world)), std::string::npos) << command;
  EXPECT_NE(command.find("--coordinator " + config_["worker-advertise-address"].as<std::string>()),
            std::string::npos)
      << command;
  // The job folder is on the coordinator's data volume: same claim, same path.
  const YAML::Node* sts = FindKind(adctld_, "StatefulSet");
  ASSERT_NE(sts, nullptr);
  const std::string claim =
      (*sts)["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as<std::string>() + "-" +
      (*sts)["metadata"]["name"].as<std::string>() + "-0";
  std::string data_volume;
  for (const auto& v : pod["volumes"]) {
    if (v["persistentVolumeClaim"] &&
        v["persistentVolumeClaim"]["claimName"].as<std::string>() == claim) {
      data_volume = v["name"].as<std::string>();
    }
  }
  ASSERT_FALSE(data_volume.empty()) << "no volume of claim " << claim;
  std::string mounted;
  for (const auto& m : rank["volumeMounts"]) {
    if (m["name"].as<std::string>() == data_volume) mounted = m["mountPath"].as<std::string>();
  }
  EXPECT_EQ(mounted, config_["data-dir"].as<std::string>());
  EXPECT_NE(command.find("--spec " + mounted + "/jobs/"), std::string::npos) << command;
  EXPECT_EQ((*job)["metadata"]["namespace"].as<std::string>(),
            (*sts)["metadata"]["namespace"].as<std::string>());
  bool token_from_secret = false;
  for (const auto& e : rank["env"]) {
    if (e["name"].as<std::string>() == "ADCTL_TOKEN") {
      token_from_secret = static_cast<bool>(e["valueFrom"]["secretKeyRef"]);
    }
  }
  EXPECT_TRUE(token_from_secret) << "the token never goes in the manifest";
  // The volume claim templates ask for a volume both adctld and the ranks mount.
  EXPECT_EQ((*sts)["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"][0].as<std::string>(),
            "ReadWriteMany");
}

}  // namespace
}  // namespace adctl
