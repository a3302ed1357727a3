"""Which slurm.conf keys a `spec.extraConfig` line may set: an allow-list.

A deny-list let through every key nobody had thought of: programs slurmctld or
slurmd run as root or SlurmUser (`HealthCheckProgram`, `TaskProlog`,
`JobCompType=jobcomp/script`, ...) and keys slurmkube renders, where a second
line silently wins (`SlurmctldParameters` without `enable_configless` breaks
every slurmd). So a key is accepted only when it is listed here: tuning that
slurmkube does not render and that names no program, plugin or file to load.

The two refusal tables exist for the error message (what was wrong), and for
the tests that keep the allow-list honest: no allowed key is one the
renderer writes (collected from `slurm.conf.j2` and a rendered reference
config) or one that runs a program. Keys are case-insensitive in Slurm
(slurm.conf(5)), so every table holds lowercase names.
"""

from __future__ import annotations

from typing import Final


def _lower(*keys: str) -> frozenset[str]:
    return frozenset(k.lower() for k in keys)


# slurm.conf(5): keys an operator may tune. Nothing here starts a program,
# loads a plugin or reads another file.
EXTRA_CONFIG_KEYS: Final = _lower(
    "AccountingStorageEnforce",
    "AccountingStorageTRES",
    "AccountingStoreFlags",
    "AcctGatherNodeFreq",
    "AllowSpecResourcesUsage",
    "BatchStartTimeout",
    "CommunicationParameters",
    "CompleteWait",
    "CpuFreqDef",
    "CpuFreqGovernors",
    "DebugFlags",
    "DefCpuPerGPU",
    "DefMemPerCPU",
    "DefMemPerGPU",
    "DefMemPerNode",
    "DependencyParameters",
    "DisableRootJobs",
    "EioTimeout",
    "EnforcePartLimits",
    "EpilogMsgTime",
    "FirstJobId",
    "GetEnvTimeout",
    "GpuFreqDef",
    "GroupUpdateForce",
    "GroupUpdateTime",
    "InactiveLimit",
    "JobAcctGatherFrequency",
    "JobFileAppend",
    "JobRequeue",
    "KeepAliveTime",
    "KillOnBadExit",
    "KillWait",
    "Licenses",
    "LogTimeFormat",
    "MaxArraySize",
    "MaxDBDMsgs",
    "MaxJobId",
    "MaxMemPerCPU",
    "MaxMemPerNode",
    "MaxStepCount",
    "MaxTasksPerNode",
    "MinJobAge",
    "MpiDefault",
    "MpiParams",
    "OverTimeLimit",
    "PreemptExemptTime",
    "PreemptMode",
    "PreemptType",
    "PriorityCalcPeriod",
    "PriorityDecayHalfLife",
    "PriorityFavorSmall",
    "PriorityFlags",
    "PriorityMaxAge",
    "PriorityUsageResetPeriod",
    "PriorityWeightAssoc",
    "PriorityWeightTRES",
    "PrivateData",
    "PrologEpilogTimeout",
    "PrologFlags",
    "PropagatePrioProcess",
    "PropagateResourceLimits",
    "PropagateResourceLimitsExcept",
    "ResvOverRun",
    "SchedulerTimeSlice",
    "SlurmctldDebug",
    "SlurmctldSyslogDebug",
    "SlurmctldTimeout",
    "SlurmdDebug",
    "SlurmdSyslogDebug",
    "SrunPortRange",
    "TaskPluginParam",
    "TCPTimeout",
    "TmpFS",
    "TrackWCKey",
    "TreeWidth",
    "UnkillableStepTimeout",
    "VSizeFactor",
    "WaitTime",
)

# Tunable keys slurmkube renders with a default only when neither extraConfig nor
# the allocation policy sets them (render/config.py SlurmConfig.tracks_gpus).
DEFAULTED_KEYS: Final = _lower("AccountingStorageTRES")

# Keys whose value is a program (or a script a plugin runs, or code to load):
# slurmctld/slurmd run it as root or SlurmUser, so a line here is code
# execution on every node. slurm.conf(5), job_submit_plugins, spank(7).
PROGRAM_KEYS: Final = _lower(
    "BurstBufferType",
    "Epilog",
    "EpilogSlurmctld",
    "HealthCheckProgram",
    "JobCompLoc",
    "JobCompType",
    "JobContainerType",
    "JobSubmitPlugins",
    "MailProg",
    "PlugStackConfig",
    "PrEpPlugins",
    "Prolog",
    "PrologSlurmctld",
    "RebootProgram",
    "ResumeFailProgram",
    "ResumeProgram",
    "ResvEpilog",
    "ResvProlog",
    "SlurmctldPrimaryOffProg",
    "SlurmctldPrimaryOnProg",
    "SrunEpilog",
    "SrunProlog",
    "SuspendProgram",
    "TaskEpilog",
    "TaskProlog",
    "UnkillableStepProgram",
)

# Keys slurmkube renders into slurm.conf (every `Key=` of slurm.conf.j2; a
# unit test collects them from the template and a rendered reference config),
# plus `Include` (a file nobody reviewed) and old spellings of rendered keys.
RENDERED_KEYS: Final = _lower(
    "AccountingStorageHost",
    "AccountingStoragePort",
    "AccountingStorageType",
    "AuthAltParameters",
    "AuthAltTypes",
    "AuthInfo",
    "AuthType",
    "BackupController",
    "ClusterName",
    "ControlMachine",
    "CredType",
    "DownNodes",
    "GresTypes",
    "HealthCheckInterval",
    "HealthCheckNodeState",
    "HealthCheckProgram",
    "Include",
    "JobAcctGatherType",
    "JobCompType",
    "MailProg",
    "MaxJobCount",
    "MessageTimeout",
    "MetricsType",
    "NodeName",
    "NodeSet",
    "PartitionName",
    "PluginDir",
    "PriorityType",
    "PriorityWeightAge",
    "PriorityWeightFairshare",
    "PriorityWeightJobSize",
    "PriorityWeightPartition",
    "PriorityWeightQOS",
    "ProctrackType",
    "ResumeProgram",
    "ResumeTimeout",
    "ReturnToService",
    "SchedulerParameters",
    "SchedulerType",
    "SelectType",
    "SelectTypeParameters",
    "SlurmctldHost",
    "SlurmctldLogFile",
    "SlurmctldParameters",
    "SlurmctldPidFile",
    "SlurmctldPort",
    "SlurmdLogFile",
    "SlurmdParameters",
    "SlurmdPidFile",
    "SlurmdPort",
    "SlurmdSpoolDir",
    "SlurmdTimeout",
    "SlurmUser",
    "StateSaveLocation",
    "SuspendExcNodes",
    "SuspendProgram",
    "SuspendTime",
    "SuspendTimeout",
    "TaskPlugin",
    "TopologyPlugin",
)


def refusal(key: str) -> str | None:
    """Why an extraConfig line may not set `key`, or None when it may."""
    lowered = key.lower()
    if lowered in EXTRA_CONFIG_KEYS:
        return None
    if lowered in PROGRAM_KEYS:
        return f"{key} names a program or plugin Slurm would run"
    if lowered in RENDERED_KEYS:
        return f"{key} is set from the spec"
    return f"{key} is not on the extraConfig allow-list"
