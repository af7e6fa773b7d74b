# Alibaba distributed storage flow sizes, 2019. Source:
# github.com/alibaba-edu/High-Precision-Congestion-Control, traffic_gen/AliStorage2019.txt
# ("collected from Alibaba's production distributed storage system in 2019").
# Format: size in bytes, cumulative percent; uniform between points.
0 0
4000 22.93
8000 69.21
16000 80.61
32000 90.47
64000 93.53
128000 96.77
256000 97.53
2000000 100
