package main

// fake-gpu-plugin: a kubelet device plugin (deviceplugin/v1beta1) that offers
// the character devices <dir>/nvidia0..N-1 as nvidia.com/gpu, so a real kubelet
// puts the GPUs into the Node's allocatable and hands the device nodes to the
// containers it schedules them to, the way NVIDIA's plugin does on a GPU node.
// The device files are made by whoever starts the node (major 195 like the
// driver's); nothing here touches hardware.

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type gpuPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devDir  string
	devices []*pluginapi.Device
}

func (p *gpuPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once and then holds the stream: the fake
// devices never change health.
func (p *gpuPlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *gpuPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		cresp := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(creq.DevicesIds, ",")},
		}
		for _, id := range creq.DevicesIds {
			cresp.Devices = append(cresp.Devices, &pluginapi.DeviceSpec{
				ContainerPath: "/dev/" + id,
				HostPath:      filepath.Join(p.devDir, id),
				Permissions:   "rw",
			})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *gpuPlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *gpuPlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func runGPUPlugin(args []string) int {
	fs := flag.NewFlagSet("fake-gpu-plugin", flag.ExitOnError)
	devDir := fs.String("dev-dir", "", "folder holding the nvidia<N> device files")
	count := fs.Int("count", 4, "number of GPUs")
	resource := fs.String("resource", "nvidia.com/gpu", "extended resource name")
	pluginDir := fs.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins folder")
	_ = fs.Parse(args)
	if *devDir == "" {
		fmt.Fprintln(os.Stderr, "fake-gpu-plugin: --dev-dir is required")
		return 2
	}
	plugin := &gpuPlugin{devDir: *devDir}
	for i := range *count {
		id := fmt.Sprintf("nvidia%d", i)
		if st, err := os.Stat(filepath.Join(*devDir, id)); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			fmt.Fprintf(os.Stderr, "fake-gpu-plugin: %s is not a character device (%v)\n", filepath.Join(*devDir, id), err)
			return 1
		}
		plugin.devices = append(plugin.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveGPUPlugin(ctx, plugin, *pluginDir, *resource); err != nil {
		fmt.Fprintln(os.Stderr, "fake-gpu-plugin:", err)
		return 1
	}
	return 0
}

// serveGPUPlugin serves the plugin socket and registers it with the kubelet,
// again whenever the kubelet restarts (it then wipes the plugin folder, so our
// socket disappearing is the signal).
func serveGPUPlugin(ctx context.Context, plugin *gpuPlugin, pluginDir, resource string) error {
	endpoint := "fake-gpu.sock"
	for ctx.Err() == nil {
		sock := filepath.Join(pluginDir, endpoint)
		_ = os.Remove(sock)
		lis, err := net.Listen("unix", sock)
		if err != nil {
			return err
		}
		srv := grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(srv, plugin)
		go func() { _ = srv.Serve(lis) }()
		if err := register(ctx, pluginDir, endpoint, resource); err != nil {
			fmt.Fprintln(os.Stderr, "fake-gpu-plugin: register (will retry):", err)
		} else {
			fmt.Fprintf(os.Stderr, "fake-gpu-plugin: registered %d x %s\n", len(plugin.devices), resource)
			waitGone(ctx, sock)
		}
		srv.Stop()
		if ctx.Err() == nil {
			time.Sleep(time.Second)
		}
	}
	return nil
}

func register(ctx context.Context, pluginDir, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
	})
	return err
}

func waitGone(ctx context.Context, path string) {
	for ctx.Err() == nil {
		if _, err := os.Stat(path); err != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}
