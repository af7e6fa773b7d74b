# WebSearch flow sizes (DCTCP, Alizadeh et al., SIGCOMM 2010), as used by the HPCC paper (Li et al.,
# SIGCOMM 2019). Source: github.com/alibaba-edu/High-Precision-Congestion-Control,
# traffic_gen/WebSearch_distribution.txt. Format: size in bytes, cumulative percent; sizes are
# uniform between points (the HPCC generator's interpolation).
0 0
10000 15
20000 20
30000 30
50000 40
80000 53
200000 60
1000000 70
2000000 80
5000000 90
10000000 97
30000000 100
